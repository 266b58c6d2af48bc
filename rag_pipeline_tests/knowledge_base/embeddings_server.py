"""An OpenAI-compatible embeddings server for the endpoint-model tests: a real HTTP server on 127.0.0.1 in a thread,
serving a shipped model (``use-multilingual-v3`` by default) in the ``/v1/embeddings`` shape.

``POST /v1/embeddings`` with ``{"model", "input": [texts]}`` and the header ``Authorization: Bearer <token>``
answers ``{"object": "list", "model", "data": [{"object": "embedding", "index": i, "embedding": [...]}, ...]}`` with
the items in reverse order (their ``index`` says which text each is). A wrong token or model gets 401 / 404 whose
body echoes the header it was sent (a careless server's; the client must not repeat it). ``faults`` is a list of
behaviours, one per request, taken from the front (then ``ok``): ``503`` (``Retry-After: 0``); ``500``;
``slow:S`` (an ``ok`` after S seconds); ``garbage`` (no JSON); ``wrong-count``; ``wrong-dimension``;
``non-numeric``; ``nan``; ``inf``; ``overflow`` (beyond float32); ``zero``; ``bad-index``; ``huge`` (a 12 MB
body). ``requests`` counts the requests, ``texts`` the texts asked for, ``most_in_flight`` the most requests
it was answering at once."""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from rag_pipeline.knowledge_base.embedding import DEFAULT_MODEL, get_embedder

HUGE_BYTES = 12 * 1024 * 1024


class _Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        """A client that hung up (its timeout, a body it refused to read) is what the faults are for: said nowhere;
        any other error printed as usual."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class EmbeddingsServer:
    def __init__(self, token: str, model_id: str = "use-m3", model: str = DEFAULT_MODEL):
        self.token, self.model_id, self.embedder = token, model_id, get_embedder(model)
        self.faults: list[str] = []
        self.requests = self.texts = 0
        self.in_flight = self.most_in_flight = 0
        self._lock = threading.Lock()
        self.server = _Server(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/embeddings"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    def __enter__(self) -> EmbeddingsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.server.shutdown()
        self.server.server_close()

    def next_behaviour(self, texts: int) -> str:
        with self._lock:
            self.requests += 1
            self.texts += texts
            return self.faults.pop(0) if self.faults else "ok"

    def entered(self, change: int) -> None:
        with self._lock:
            self.in_flight += change
            self.most_in_flight = max(self.most_in_flight, self.in_flight)

    def encode(self, texts: list[str]) -> list[list[float]]:
        with self._lock:  # one encode at a time (the model object is shared)
            return self.embedder.embed(texts).tolist()


def _handler(server: EmbeddingsServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            server.entered(+1)
            try:
                self._answer()
            finally:
                server.entered(-1)

        def _answer(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            texts = body["input"]
            step = server.next_behaviour(len(texts))
            sent = self.headers.get("Authorization", "")
            if self.path != "/v1/embeddings":
                return self._send(404, b'{"error": "no such path"}')
            if sent != f"Bearer {server.token}":
                return self._send(401, json.dumps({"error": f"bad token {sent!r}"}).encode())
            if body.get("model") != server.model_id:
                return self._send(404, json.dumps({"error": f"no model {body.get('model')!r}; you sent "
                                                            f"Authorization {sent!r}"}).encode())
            if step in ("503", "500"):
                return self._send(int(step), b'{"error": "busy"}', {"Retry-After": "0"})
            if step.startswith("slow:"):
                time.sleep(float(step.split(":")[1]))
            if step == "garbage":
                return self._send(200, b"<html>not json")
            if step == "huge":
                return self._send(200, b'{"data": [], "padding": "' + b"x" * HUGE_BYTES + b'"}')
            vectors = server.encode(texts)
            if step == "wrong-count":
                vectors = vectors[:-1] if len(vectors) > 1 else vectors * 2
            elif step == "wrong-dimension":
                vectors = [v[:-1] for v in vectors]
            elif step == "non-numeric":
                vectors[0][3] = "0.5"
            elif step in ("nan", "inf", "overflow"):  # Python's json writes NaN / Infinity (and reads them)
                vectors[0][0] = {"nan": float("nan"), "inf": float("inf"), "overflow": 1e39}[step]
            elif step == "zero":
                vectors[-1] = [0.0] * len(vectors[-1])
            data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
            if step == "bad-index":
                data[0]["index"] = len(data) + 3
            text = json.dumps({"object": "list", "model": server.model_id, "data": data[::-1],
                               "usage": {"prompt_tokens": 0, "total_tokens": 0}})
            return self._send(200, text.encode())

        def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler
