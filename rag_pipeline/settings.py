"""Every ``RAG_*`` environment variable in one typed object: its default, its meaning, one parse.

:func:`get_settings` caches a :class:`Settings` per ``RAG_*`` environment (a bad value: :class:`SettingsError`);
``python -m rag_pipeline.settings`` prints docs/configuration.md's table; :func:`load_env_file` loads ``.env``."""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

KB_DATABASE = "rag"
DAGSTER_DATABASE = "dagster"
ENV_PREFIX = "RAG_"


class SettingsError(ValueError):
    """A ``RAG_*`` variable has a value that cannot be used; the message names the variable."""


def _stripped(value: object) -> object:
    return value.strip() if isinstance(value, str) else value


PositiveInt = Annotated[int, BeforeValidator(_stripped), Field(ge=1, strict=False)]
_SIZE = re.compile(r"\d+(kB|MB|GB)")


def _size(value: object) -> object:
    value = _stripped(value)
    if isinstance(value, str) and value and not _SIZE.fullmatch(value):
        raise ValueError("must be a size like 512MB or 1GB")
    return value


_USERINFO = re.compile(r"(://)[^/@\s'\"]*@")  # a URL's user:password, never printed in an error
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\*?|\*")


def _items(value: object) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()] if isinstance(value, str) else []


def _endpoint_list(value: object) -> object:
    """``RAG_COLLECT_ENDPOINTS``: every item an http(s) URL with a host, no user, query or fragment."""
    from urllib.parse import urlsplit  # noqa: PLC0415

    for item in _items(value):
        try:
            parts = urlsplit(item)
            parts.port  # noqa: B018 - a bad port raises
        except ValueError:
            raise ValueError(f"{item!r} is not a URL") from None
        if parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc or parts.query \
                or parts.fragment or "{" in item:
            raise ValueError(f"{item!r}: expected http(s)://host[:port][/path] (no user, query, fragment or "
                             "placeholder)")
    return value


def _env_names(value: object) -> object:
    """``RAG_COLLECT_ENV``: names or ``PREFIX*`` patterns; a ``RAG_`` item is refused (never readable)."""
    for item in _items(value):
        if not _ENV_NAME.fullmatch(item):
            raise ValueError(f"{item!r} is not a variable name or a PREFIX* pattern")
        if item.upper().startswith(ENV_PREFIX):
            raise ValueError(f"{item!r}: the service's own RAG_* settings are never readable over the API")
    return value


class Settings(BaseSettings):
    """The configuration of every front end (CLI, Dagster, HTTP); each field is the variable ``RAG_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_ignore_empty=True, extra="ignore", frozen=True)

    database_url: str | None = Field(
        None, description="Any PostgreSQL with pgvector ≥ 0.8 (SQLAlchemy URL, any driver scheme). "
                          "Unset: the embedded server.")
    dagster_pg_url: str | None = Field(
        None, description="Dagster's run/event storage (`postgresql+psycopg2://`); `rag-pipeline db start` "
                          "writes it to `.env`. Unset: the database `dagster` on the server of `RAG_DATABASE_URL` "
                          "(created when missing; never the knowledge-base database) or of the embedded server.")
    pgdata: Path | None = Field(
        None, description="Data directory of the embedded server. Default `<project>/.rag_pipeline/pgdata`.")
    datasets_dir: Path | None = Field(
        None, description="Folder of dataset files the Dagster sensor watches. Default `<project>/datasets`.")
    strategies_file: Path | None = Field(
        None, description="Strategy registry YAML. Default: the packaged `rag_pipeline/retrieval/strategies.yaml`.")
    project_root: Path | None = Field(
        None, description="The project folder (`.env`, `datasets/`, `reports/`, `.rag_pipeline/`). Default: "
                          "the checkout holding `pyproject.toml`, else the working directory.")
    eval_readers: PositiveInt = Field(
        2, description="Read connections an evaluation searches with in parallel (one PostgreSQL backend each).")
    click_processes: PositiveInt | None = Field(
        None, description="Processes one click (several strategies of one dataset: `evaluate --strategy A "
                          "--strategy B`, a console or API click) evaluates its strategies in at once: forked "
                          "after the knowledge base's in-memory indexes are loaded, which they share. Default: "
                          "every core. 1: one strategy after the other in one process.")
    exact_vector_leg: Literal["memory", "sql"] = Field(
        "memory", description="Where an evaluation runs the vector leg of a `vector_search: exact` strategy: "
                              "`memory` (the knowledge base's vectors loaded once per run, a float32 matrix "
                              "product per batch and the candidates it finds scored in float64) or `sql` (the "
                              "exact SQL statement, the reference). HNSW strategies always read the index.")
    keyword_leg: Literal["memory", "sql"] = Field(
        "memory", description="Where an evaluation runs the keyword leg (BM25 or ts_rank_cd): `memory` (the "
                              "knowledge base's postings loaded once per run, the same hits and scores as the SQL "
                              "statement) or `sql` (the statement, the reference).")
    memory_legs_mb: PositiveInt | None = Field(
        None, description="Memory (MiB) one in-memory leg index of an evaluation may take while it loads (the "
                          "keyword postings, or one model's exact vectors). Default: a quarter of the machine's "
                          "RAM. An index estimated above it is not loaded: that leg runs its SQL statement "
                          "instead, and the run's log says so.")
    index_cache_mb: Annotated[int, Field(ge=0)] = Field(
        2048, description="Disk (MiB) the in-memory leg indexes (BM25 postings, exact-leg vectors) may keep in "
                          "`<project>/.rag_pipeline/index-cache`: the next process of the same knowledge base "
                          "version reads them from there instead of the database. 0: not kept. Without a project "
                          "(`RAG_PROJECT_ROOT` unset and no checkout, e.g. a Celery worker in an empty directory) "
                          "none are kept.")
    embed_threads: PositiveInt | None = Field(
        None, description="BLAS threads of the USE encoder. Default: every core (ingestion next to a local "
                          "server: one less).")
    pg_shared_buffers: Annotated[str | None, BeforeValidator(_size)] = Field(
        None, description="`shared_buffers` of the embedded server at its next boot. Default: RAM/4, at most 1GB.")
    run_stale_seconds: PositiveInt = Field(
        600, description="Heartbeat age after which a `running` evaluation run reads as `abandoned`. A run "
                          "beats every fifth of it (at most 5 s); one silent for six beats (at most this) is failed at "
                          "the next check, from any machine.")
    statement_timeout_s: Annotated[float, BeforeValidator(_stripped), Field(gt=0, allow_inf_nan=False)] = Field(
        60, description="Longest a retrieval statement may run (seconds, `SET LOCAL statement_timeout`); "
                        "longer fails the case's evaluation with a clear error (exit 2).")
    max_document_bytes: PositiveInt = Field(
        10 * 1024 * 1024, description="Largest text of one document, in bytes (a `.md`/`.txt`/`.html` file, or "
                                      "the `text` of one `.jsonl` line): a bigger one is refused, naming the file "
                                      "(and line), before ingestion starts. Default 10 MB.")
    sensor_strategies: str | None = Field(
        None, description="Comma-separated strategy versions the Dagster sensor evaluates a new dataset with "
                          "(a dataset's `metadata.strategies` list wins). Default: every registry version. "
                          "Either way only those the knowledge base can run (every model of every leg and stage, "
                          "the text mode).")
    evaluation_queue: str = Field(
        "default", min_length=1, max_length=200,
        description="The queue of evaluation runs this process serves: the HTTP API queues its runs there, and the "
                    "Dagster daemon's `queued_evaluations` sensor runs that queue's runs only (two Dagster instances "
                    "on one database: one queue each).")
    dagster_ui_url: str = Field(
        "http://127.0.0.1:3000", description="Address of the Dagster UI (`make dev` starts it there): the console "
                                             "links each run's Dagster run id to `<address>/runs/<id>`.")
    api_token: SecretStr | None = Field(
        None, description="Token of the HTTP service (`rag-pipeline serve`): required to bind beyond loopback "
                          "(at least 16 characters); then every API call needs `Authorization: Bearer <token>` "
                          "and every console page a login with it. Unset: loopback only, no login.")
    celery_broker_url: SecretStr | None = Field(
        None, description="Redis URL of the Celery broker and result backend (`redis://[:PASSWORD@]HOST:6379/0`) "
                          "that `deploy/celery/dagster.yaml` reads: the daemon sends runs there, the workers take "
                          "them (deploy/celery/README.md). Unset: runs use the default launcher's `dagster.yaml`.")
    allowed_hosts: str | None = Field(
        None, description="Comma-separated `Host` names (optionally `name:port`) the HTTP service answers besides "
                          "`127.0.0.1`, `localhost` and `[::1]` on its port; needs `RAG_API_TOKEN`. Unset: with a "
                          "token any Host, without one the loopback names only (a DNS-rebinding guard). Another "
                          "Host → 421.")
    collect_endpoints: Annotated[str | None, BeforeValidator(_endpoint_list)] = Field(
        None, description="Comma-separated base URLs (`http(s)://host[:port][/path]`) of the RAG endpoints the HTTP "
                          "API's answer collection may call: an endpoint URL must start with one (same scheme, host "
                          "and port; its path under the base's), at whatever address the host has, loopback and "
                          "private included. Unset, and without `RAG_COLLECT_PUBLIC_ENDPOINTS`: the route refuses "
                          "every endpoint (403). The CLI is not limited.")
    collect_public_endpoints: bool = Field(
        False, description="`1`: the HTTP API's answer collection may also call an endpoint whose host resolves to "
                           "public (globally routable) addresses only; the connection goes to the address checked. "
                           "Loopback, private, link-local, reserved and multicast addresses stay refused.")
    collect_env: Annotated[str | None, BeforeValidator(_env_names)] = Field(
        None, description="Comma-separated environment variables (`NAME`, or `PREFIX*`) the HTTP API's answer "
                          "collection may read for an `env:NAME` header value; never a `RAG_*` variable. Unset: "
                          "none (a header `env:` value is refused). The CLI reads any variable.")
    collect_slots: PositiveInt = Field(
        2, description="Answer collections the HTTP API runs at once; one more is refused with 429 and `Retry-After`.")
    debug: bool = Field(False, description="`1`: the CLI shows the traceback of an unexpected error.")
    judge_cache: Path | None = Field(
        None, description="JSON Lines file caching the answer judge's replies by (prompt hash, model, repeat), so "
                          "a re-run asks nothing (docs/judge.md). Default `<project>/.rag_pipeline/judge-cache.jsonl`.")
    judge_api_key: SecretStr | None = Field(
        None, description="Bearer token of the answer judge's chat endpoint (`answers evaluate --judge-url`), when "
                          "it needs one; never a flag, never printed or stored (docs/judge.md).")
    bench_data: Path | None = Field(
        None, description="Folder of the benchmark collections (`scifact/`) for the benchmark-data tests; set "
                          "by CI, which then fails if it is missing. Unset: those tests are skipped.")
    test_database_url: str | None = Field(
        None, description="Tests only: run the suite against this server instead of a fresh embedded one.")
    update_snapshots: bool = Field(False, description="Tests only: `1` rewrites the asset-graph snapshot.")
    update_screenshots: bool = Field(False, description="Tests only: `1` makes the console's browser test rewrite "
                                                        "`docs/console-*.png`.")

    def resolved_project_root(self) -> Path:
        return self.named_project_root() or Path.cwd().resolve()

    def named_project_root(self) -> Path | None:
        """``RAG_PROJECT_ROOT``, else the checkout this package runs from; None: neither (an installed wheel)."""
        if self.project_root:
            return self.project_root.expanduser().resolve()
        for parent in Path(__file__).resolve().parents:
            if (parent / "pyproject.toml").exists() and (parent / "rag_pipeline").is_dir():
                return parent
        return None


_MESSAGES = {"greater_than_equal": "must be a positive integer", "int_parsing": "must be a positive integer",
             "int_from_float": "must be a positive integer", "bool_parsing": "must be 1/0, true/false"}


def _error_text(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        name = ENV_PREFIX + str(err["loc"][0]).upper() if err["loc"] else "settings"
        message = _MESSAGES.get(err["type"]) or err["msg"].removeprefix("Value error, ")
        parts.append(_USERINFO.sub(r"\1***@", f"{name} {message}, got {err.get('input')!r}"))
    return "; ".join(parts)


@functools.lru_cache(maxsize=16)
def _settings_for(environment: tuple[tuple[str, str], ...]) -> Settings:  # noqa: ARG001 - the cache key
    try:
        return Settings()
    except ValidationError as exc:
        raise SettingsError(_error_text(exc)) from None


def get_settings() -> Settings:
    """The settings of the current environment (parsed once per distinct set of ``RAG_*`` values)."""
    return _settings_for(tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(ENV_PREFIX))))


def load_env_file(folder: str | Path | None = None) -> Path | None:
    """Load ``<folder or cwd>/.env`` into ``os.environ`` (set variables win), as the ``dagster`` command does."""
    from dotenv import load_dotenv  # noqa: PLC0415

    path = Path(folder or Path.cwd()) / ".env"
    if path.is_file():
        load_dotenv(path, override=False)
        return path
    return None


def project_root() -> Path:
    """The folder holding ``pyproject.toml`` (the repo root), else the current directory (``RAG_PROJECT_ROOT``)."""
    return get_settings().resolved_project_root()


def pgdata_dir() -> Path:
    configured = get_settings().pgdata
    return configured.expanduser().resolve() if configured else project_root() / ".rag_pipeline" / "pgdata"


def datasets_dir() -> Path:
    configured = get_settings().datasets_dir
    return configured.expanduser().resolve() if configured else project_root() / "datasets"


def judge_cache_file() -> Path:
    configured = get_settings().judge_cache
    return configured.expanduser().resolve() if configured else project_root() / ".rag_pipeline" / "judge-cache.jsonl"


def index_cache_dir() -> Path | None:
    """``<project>/.rag_pipeline/index-cache``; None without a project (``RAG_PROJECT_ROOT`` unset, no checkout: a
    worker in an empty directory keeps no files)."""
    root = get_settings().named_project_root()
    return root / ".rag_pipeline" / "index-cache" if root else None


def reports_dir() -> Path:
    return project_root() / "reports"


def markdown_table() -> str:
    """The configuration table of ``docs/configuration.md``, generated from :class:`Settings`."""
    lines = ["| variable | default | meaning |", "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        value = str(field.default).lower() if isinstance(field.default, bool) else field.default
        default = "—" if field.default is None else f"`{value}`"
        lines.append(f"| `{ENV_PREFIX}{name.upper()}` | {default} | {field.description} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())
