"""The judge's exchange with its OpenAI-compatible chat endpoint (:class:`JudgeClient`): one request per
(prompt, repeat), retried, parsed, scrubbed and cached by :class:`JudgeCache` (docs/judge.md)."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import httpx

from rag_pipeline.answers.judge.prompts import PROMPT_VERSION
from rag_pipeline.contracts.errors import BadInputError
from rag_pipeline.contracts.judge import JudgeConfig, JudgeIdentity
from rag_pipeline.settings import judge_cache_file
from rag_pipeline.storage.http.retry_policy import retry_after_seconds
from rag_pipeline.storage.http.scrubbing import Scrubber, header_secrets, redact_url, url_secrets

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_RETRY_AFTER_S = 60.0
ERROR_BODY_CHARS = 200
MAX_REPLY_BYTES = 8 * 1024 * 1024
"""A judge reply longer than this is not read further (the answer is not judged), as the collector's cap."""


class JudgeConfigError(BadInputError, ValueError):
    """The judge's configuration cannot be used (its URL); the message names the field."""


def judge_identity(config: JudgeConfig) -> JudgeIdentity:
    """The judge's identity: the URL's host and port (never its credentials or path), the model, the prompts."""
    url = _base_url(config)
    host = url.host + (f":{url.port}" if url.port else "")
    return JudgeIdentity(host=host, model=config.model, prompt_version=PROMPT_VERSION)


def _base_url(config: JudgeConfig) -> httpx.URL:
    shown = redact_url(config.url)
    try:
        url = httpx.URL(config.url)
    except (httpx.InvalidURL, TypeError):
        raise JudgeConfigError(f"judge url {shown!r} is not a URL") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise JudgeConfigError(f"judge url {shown!r} must be http(s)://host[:port][/path]")
    return url


def prompt_sha256(body: Mapping[str, object]) -> str:
    """sha256 of the full prompt: the messages and the response format, as canonical JSON."""
    prompt = {"messages": body["messages"], "response_format": body.get("response_format")}
    return hashlib.sha256(json.dumps(prompt, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


class JudgeCache:
    """Judge replies by (prompt sha256, model, repeat) in a JSON Lines file; a torn last line is skipped."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or judge_cache_file()
        self._lock = threading.Lock()
        self._replies: dict[tuple[str, str, int], str] = {}
        if self.path.is_file():
            self._load()

    def _load(self) -> None:
        with self.path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                try:
                    entry = json.loads(line)
                    key = (str(entry["prompt_sha256"]), str(entry["model"]), int(entry["repeat"]))
                    self._replies[key] = str(entry["content"])
                except (ValueError, KeyError, TypeError):
                    log.warning("%s:%d: not a judge cache entry, skipped", self.path, number)

    def __len__(self) -> int:
        return len(self._replies)

    def get(self, prompt_hash: str, model: str, repeat: int) -> str | None:
        with self._lock:
            return self._replies.get((prompt_hash, model, repeat))

    def put(self, prompt_hash: str, model: str, repeat: int, content: str) -> None:
        line = json.dumps({"prompt_sha256": prompt_hash, "model": model, "repeat": repeat, "content": content,
                           "at": datetime.now(UTC).isoformat(timespec="seconds")}, ensure_ascii=False) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode("utf-8"))
            finally:
                os.close(fd)
            self._replies[(prompt_hash, model, repeat)] = content


class JudgeClient:
    """One thread-safe httpx client for a judge endpoint; :attr:`requests` counts the requests made."""

    def __init__(self, config: JudgeConfig, cache: JudgeCache | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.config = config
        self.cache = cache if cache is not None else JudgeCache()
        self.endpoint = str(_base_url(config)).rstrip("/") + "/chat/completions"
        headers = {"Authorization": f"Bearer {config.api_key.get_secret_value()}"} if config.api_key else {}
        self.scrub = Scrubber([*(s for v in headers.values() for s in header_secrets(v)), *url_secrets(config.url)])
        self._http = httpx.Client(timeout=config.timeout_s, headers=headers,
                                  limits=httpx.Limits(max_connections=config.concurrency))
        self._sleep = sleep
        self._count_lock = threading.Lock()
        self.requests = 0

    def __enter__(self) -> JudgeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.close()

    def ask(self, body: Mapping[str, object], repeat: int, parse: Callable[[str], T]) -> tuple[T | None, str | None]:
        """(the parsed reply, None), or (None, why not): from the cache, else the endpoint (temperature 0)."""
        key = prompt_sha256(body)
        cached = self.cache.get(key, self.config.model, repeat)
        if cached is not None:
            try:
                return parse(self.scrub(cached)), None
            except ValueError:
                log.warning("a cached judge reply no longer parses; asking again")
        content, reason = self._post({**body, "model": self.config.model, "temperature": 0})
        if content is None:
            return None, self.scrub(reason or "no reply")
        content = self.scrub(content)
        try:
            reply = parse(content)
        except ValueError as exc:
            return None, self.scrub(f"malformed reply: {exc}")
        self.cache.put(key, self.config.model, repeat, content)
        return reply, None

    def _post(self, body: dict[str, object]) -> tuple[str | None, str | None]:
        reason = "not asked"
        for attempt in range(self.config.retries + 1):
            wait = self.config.backoff_s * 2 ** attempt
            with self._count_lock:
                self.requests += 1
            try:
                status, text, retry_after = self._exchange(body)
            except httpx.TimeoutException:
                reason = f"no reply within {self.config.timeout_s:g} s"
            except httpx.TransportError as exc:
                reason = f"cannot reach the judge: {type(exc).__name__}: {exc}"
            except httpx.DecodingError as exc:  # a body its Content-Encoding does not decode
                return None, f"the reply could not be decoded: {exc}"
            except _TooLongError:
                return None, (f"the reply is longer than {MAX_REPLY_BYTES // 2**20} MB; it was not read further "
                              "(not judged)")
            else:
                if status < 300:
                    return _content(text)
                reason = f"HTTP {status}: {text[:ERROR_BODY_CHARS]}"
                if status != 429 and status < 500:
                    return None, reason
                wait = _retry_after(retry_after, wait)
            if attempt < self.config.retries:
                self._sleep(wait)
        return None, f"{reason} (after {self.config.retries + 1} attempts)"

    def _exchange(self, body: dict[str, object]) -> tuple[int, str, str | None]:
        """(status, the reply decoded, its Retry-After) of one request, bounded in size and time."""
        deadline = time.monotonic() + self.config.timeout_s
        with self._http.stream("POST", self.endpoint, json=body) as response:
            received = bytearray()
            for chunk in response.iter_bytes():
                if len(received) + len(chunk) > MAX_REPLY_BYTES:
                    raise _TooLongError
                received += chunk
                if time.monotonic() > deadline:
                    raise httpx.ReadTimeout("the whole reply took too long")
            text = self.scrub(bytes(received).decode("utf-8", errors="replace"))  # before any cut of it
            return response.status_code, text, response.headers.get("Retry-After")


class _TooLongError(Exception):
    """A reply past :data:`MAX_REPLY_BYTES`."""


def _retry_after(value: str | None, default: float) -> float:
    """The wait a ``Retry-After`` asks for (seconds or an HTTP date), at most :data:`MAX_RETRY_AFTER_S`; an
    unreadable one (``nan``, ``²``, garbage) is ignored and the backoff ``default`` used."""
    try:
        seconds = retry_after_seconds(value)
    except (ValueError, OverflowError):
        seconds = None
    if seconds is None or math.isnan(seconds):
        return default
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)  # a 5,000-digit number of seconds: the cap


def _content(text: str) -> tuple[str | None, str | None]:
    """The first choice's message content of a chat completion (``text``: the reply's body)."""
    try:
        content = json.loads(text)["choices"][0]["message"]["content"]
    except RecursionError:
        return None, "malformed reply: the JSON is nested too deeply to read"
    except ValueError as exc:
        return None, f"malformed reply: not a chat completion: {_json_problem(exc, text)}"
    except (KeyError, IndexError, TypeError):
        return None, f"malformed reply: not a chat completion: {text[:ERROR_BODY_CHARS]!r}"
    if not isinstance(content, str) or not content.strip():
        return None, "malformed reply: the completion has no text content"
    return content, None


def _json_problem(exc: ValueError, text: str) -> str:
    """What is wrong with JSON that did not load, without Python's advice (``sys.set_int_max_str_digits``)."""
    if not isinstance(exc, json.JSONDecodeError):
        return "it holds an integer too long to read"
    return f"{exc.msg} at line {exc.lineno} column {exc.colno}: {text[:ERROR_BODY_CHARS]!r}"
