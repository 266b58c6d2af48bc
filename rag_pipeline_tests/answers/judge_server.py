"""A real OpenAI-compatible chat server on 127.0.0.1 for the judge's tests, playing back recorded replies.

Each reply is a JSON file of ``rag_pipeline_tests/data/judge/`` (``status``, optional ``headers``, ``body``).
A test scripts the replies per task (the ``response_format`` name of the request: ``faithfulness`` or
``refusal``); they are served in order, the last one again once the script is used up. Every request is kept
(path, headers, JSON body) so a test can count them and read the prompts it was sent.

A script may also hold a reply made by the test (a dict): ``raw`` (bytes) is sent as the body instead of
``body``; ``stream_bytes: N`` sends N bytes of ``x`` in 1 MB pieces, stopping when the client goes away
(:attr:`JudgeServer.bytes_sent` counts what was written). In any body, ``{authorization}`` is replaced by the
request's ``Authorization`` value and ``{authorization-u}`` by that value with every character a JSON
``\\uXXXX`` escape (a judge echoing its API key).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "judge"


def recorded(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))


class JudgeServer:
    """``with JudgeServer() as server:`` — ``server.url`` is the base URL (``…/v1``)."""

    def __init__(self) -> None:
        self.scripts: dict[str, list[str | dict]] = {}
        self.requests: list[dict] = []
        self.delay_s = 0.0
        self._lock = threading.Lock()
        self._served: dict[str, int] = {}
        self.bytes_sent = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length))
                reply = owner._next(self.path, dict(self.headers), body)
                if owner.delay_s:
                    time.sleep(owner.delay_s)
                if "stream_bytes" in reply:
                    self._stream(reply["stream_bytes"])
                    return
                payload = reply["raw"] if "raw" in reply else json.dumps(reply["body"], ensure_ascii=False).encode()
                key = self.headers.get("Authorization", "")
                payload = payload.replace(b"{authorization}", key.encode()).replace(
                    b"{authorization-u}", "".join(f"\\u{ord(c):04x}" for c in key).encode())
                try:
                    self.send_response(reply["status"])
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for name, value in reply.get("headers", {}).items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and went away (the hanging-judge test)

            def _stream(self, size: int) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(size))
                self.end_headers()
                piece = b"x" * (1024 * 1024)
                try:
                    while owner.bytes_sent < size:
                        self.wfile.write(piece[: size - owner.bytes_sent])
                        owner.bytes_sent += min(len(piece), size - owner.bytes_sent)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client stopped reading at its cap

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_port}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    def _next(self, path: str, headers: dict, body: dict) -> dict:
        task = body.get("response_format", {}).get("json_schema", {}).get("name", "").removesuffix("_reply")
        with self._lock:
            self.requests.append({"path": path, "headers": headers, "body": body, "task": task})
            script = self.scripts.get(task)
            if not script:
                return {"status": 404, "body": {"error": {"message": f"no reply scripted for {task!r}"}}}
            index = self._served.get(task, 0)
            self._served[task] = index + 1
            chosen = script[min(index, len(script) - 1)]
            return recorded(chosen) if isinstance(chosen, str) else chosen

    def play(self, task: str, *names: str | dict) -> None:
        """Serve these recorded replies (or replies made by the test) to ``task`` from now on, from the first."""
        with self._lock:
            self.scripts[task] = list(names)
            self._served[task] = 0

    def __enter__(self) -> JudgeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
