"""A stranger's retriever for the HTTP strategy tests and bench: a real HTTP server on 127.0.0.1 in a thread.

``POST /search`` with ``{"question", "case_id", "k"}`` ranks ``chunks`` (id → text) by the number of the
question's words each holds (ties by id descending), and answers ``{"hits": [{"id", "score", "vector_rank",
"keyword_rank", "text", "title"}, ...], "texts": [...]}`` (the first ``k`` with a word in common; every hit has a
vector rank, every other one a keyword rank and a title), after ``delay`` seconds. ``plan[case_id]`` is a list of
behaviours, one per attempt (the last repeats): ``ok``; ``503`` (with ``Retry-After: 0``); ``slow:S`` (an ``ok``
after S seconds); ``garbage`` (no JSON); ``ids-not-list``; ``ids-wrong-type``; ``huge`` (a 12 MB body);
``text-not-string`` (the first hit's text a number); ``texts-short`` (``texts`` one shorter than the hits).
``requests[case_id]`` counts the requests."""

from __future__ import annotations

import collections
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_WORD = re.compile(r"\w+")
HUGE_BYTES = 12 * 1024 * 1024


def rank(chunks: dict[str, str], question: str, k: int) -> list[tuple[str, float]]:
    """The server's ranking: ``(id, score)`` best first."""
    words = {w.lower() for w in _WORD.findall(question)}
    scored = [(cid, float(len(words & {w.lower() for w in _WORD.findall(text)}))) for cid, text in chunks.items()]
    scored = [s for s in scored if s[1] > 0]
    scored.sort(key=lambda s: (s[1], s[0]), reverse=True)  # ties by id descending, as trec_eval orders them
    return scored[:k]


class RetrieverServer:
    def __init__(self, chunks: dict[str, str], plan: dict[str, list[str]] | None = None, delay: float = 0.0):
        self.chunks, self.plan, self.delay = chunks, plan or {}, delay
        self.requests: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.server.request_queue_size = 128
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/search"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    def __enter__(self) -> RetrieverServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.server.shutdown()
        self.server.server_close()

    def behaviour(self, case_id: str) -> str:
        with self._lock:
            self.requests[case_id] += 1
            steps = self.plan.get(case_id, ["ok"])
            return steps[min(self.requests[case_id], len(steps)) - 1]


def _handler(server: RetrieverServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            step = server.behaviour(str(body.get("case_id")))
            if step == "503":
                return self._send(503, b"busy", {"Retry-After": "0"})
            time.sleep(float(step.split(":")[1]) if step.startswith("slow:") else server.delay)
            hits = rank(server.chunks, body["question"], int(body["k"]))
            reply: dict = {"hits": [{"id": cid, "score": score, "vector_rank": i + 1,  # stages: every hit "vector",
                                     "keyword_rank": i + 1 if i % 2 == 0 else None,  # every other one "keyword"
                                     "text": server.chunks[cid], "title": f"T {cid}" if i % 2 == 0 else None}
                                    for i, (cid, score) in enumerate(hits)],
                           "texts": [server.chunks[cid] for cid, _ in hits]}
            if step == "text-not-string" and hits:
                reply["hits"][0]["text"] = 7
            if step == "texts-short":
                reply["texts"] = reply["texts"][:-1]
            if step == "garbage":
                return self._send(200, b"<html>not json", {})
            if step == "ids-not-list":
                reply = {"hits": {"id": "x", "score": 1.0}}
            if step == "ids-wrong-type":
                reply = {"hits": [{"id": [1], "score": 1.0}]}
            if step == "huge":
                return self._send(200, b'{"hits": [], "padding": "' + b"x" * HUGE_BYTES + b'"}', {})
            return self._send(200, json.dumps(reply).encode(), {"Content-Type": "application/json"})

        def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler
