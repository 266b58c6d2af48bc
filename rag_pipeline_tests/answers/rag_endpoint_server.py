"""A stranger's RAG endpoint for the collection tests: a real HTTP server on 127.0.0.1 in a thread.

It answers ``POST /rag`` with ``{"answer", "citations", "contexts"}`` for the posted ``case_id`` and counts the
requests per case (``replies[case_id]``, when given, is the reply body instead). ``plan[case_id]`` is a list
of behaviours, one per attempt (the last one repeats):

- ``ok``: a normal reply (``delay`` seconds late, the server's default delay otherwise);
- ``503`` / ``500`` / ``404``: that status with a short body; ``429:N``: 429 with ``Retry-After: N``;
  ``429-date``: 429 with ``Retry-After`` an HTTP date one second ahead;
- ``slow:S``: a normal reply after S seconds; ``hang``: no reply until the server stops;
- ``malformed``: a body that is not JSON; ``no-answer``: JSON without ``answer``;
- ``raw:NAME``: a 200 whose body (bytes) and extra headers are ``raw[NAME]`` (hostile replies);
- ``bad-citations``: ``citations`` a string; ``huge``: a 50 MB body (a JSON string), written in 1 MB pieces;
- ``echo-headers``: the request's headers in the reply; ``500-echo``: a 500 whose body echoes the headers;
- ``echo-answer``: the ``Authorization`` and ``X-Api-Key`` values as the answer, the citations and the contexts,
  verbatim; ``echo-escaped``: the same with every character of the reply's strings a JSON ``\\uXXXX`` escape;
  ``echo-percent``: the values percent-encoded (``%XX`` for every character but letters and digits).
"""

from __future__ import annotations

import collections
import contextlib
import email.utils
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote

HUGE_BYTES = 50 * 1024 * 1024


class RagEndpoint:
    def __init__(self, plan: dict[str, list[str]] | None = None, delay: float = 0.0,
                 replies: dict[str, dict] | None = None, raw: dict[str, tuple[bytes, dict[str, str]]] | None = None):
        self.plan = plan or {}
        self.replies = replies or {}
        self.raw = raw or {}
        self.delay = delay
        self.requests: collections.Counter[str] = collections.Counter()
        self.bodies: list[dict] = []
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self.connections: set[socket.socket] = set()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/rag"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    def __enter__(self) -> RagEndpoint:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop serving and close the listening socket: new connections are refused."""
        self.stopping.set()
        if self._thread.is_alive():
            self.server.shutdown()
        self.server.server_close()
        for conn in list(self.connections):  # the kept-alive connections too: the server is gone
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def behaviour(self, case_id: str) -> str:
        with self._lock:
            self.requests[case_id] += 1
            steps = self.plan.get(case_id, ["ok"])
            return steps[min(self.requests[case_id], len(steps)) - 1]


def reply_for(case_id: str, question: str) -> dict:
    return {"answer": f"The answer to: {question}", "citations": [f"chunk-of-{case_id}"],
            "contexts": [f"chunk-of-{case_id}", "11111111-2222-3333-4444-555555555555"]}


def _handler(endpoint: RagEndpoint):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            endpoint.connections.add(self.connection)

        def log_message(self, *_args) -> None:  # quiet
            pass

        def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            endpoint.bodies.append(request)
            case_id, question = str(request.get("case_id")), str(request.get("question"))
            step = endpoint.behaviour(case_id)
            ok = json.dumps(endpoint.replies.get(case_id) or reply_for(case_id, question)).encode()
            if step == "ok":
                time.sleep(endpoint.delay)
                self._send(200, ok)
            elif step.isdigit():
                self._send(int(step), f"upstream says {step} for {case_id}".encode())
            elif step.startswith("429:"):
                self._send(429, b"slow down", {"Retry-After": step[4:]})
            elif step == "429-date":
                self._send(429, b"slow down", {"Retry-After": email.utils.formatdate(time.time() + 1, usegmt=True)})
            elif step.startswith("slow:"):
                time.sleep(float(step[5:]))
                self._send(200, ok)
            elif step == "hang":
                endpoint.stopping.wait(60)
            elif step == "malformed":
                self._send(200, b'{"answer": "cut here')
            elif step == "no-answer":
                self._send(200, json.dumps({"text": "x", "citations": []}).encode())
            elif step == "bad-citations":
                self._send(200, json.dumps({"answer": "x", "citations": "chunk-1"}).encode())
            elif step.startswith("raw:"):
                body, headers = endpoint.raw[step[4:]]
                self._send(200, body, headers)
            elif step == "huge":
                self._huge()
            elif step in ("echo-headers", "500-echo"):
                echoed = {"answer": "echo", "headers": dict(self.headers.items())}
                self._send(200 if step == "echo-headers" else 500, json.dumps(echoed).encode())
            elif step in ("echo-answer", "echo-escaped", "echo-percent"):
                self._send(200, self._echo(step))

        def _echo(self, step: str) -> bytes:
            values = [self.headers.get(name, "") for name in ("Authorization", "X-Api-Key")]
            if step == "echo-percent":
                values = [quote(v, safe="") for v in values]
            reply = {"answer": " and ".join(values), "citations": values, "contexts": values}
            text = json.dumps(reply)
            if step == "echo-escaped":  # every character of the echoed values, keys and punctuation left
                for value in values:
                    text = text.replace(value, "".join(f"\\u{ord(c):04x}" for c in value))
            return text.encode()

        def _huge(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(HUGE_BYTES))
            self.end_headers()
            piece = b"x" * (1024 * 1024)
            try:
                self.wfile.write(b'{"answer": "' + piece[: 1024 * 1024 - 12])
                for _ in range(HUGE_BYTES // len(piece) - 2):
                    self.wfile.write(piece)
                self.wfile.write(piece[:-2] + b'"}')
            except (BrokenPipeError, ConnectionResetError):  # the client stopped reading at its cap
                pass

    return Handler
