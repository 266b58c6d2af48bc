"""``rag-pipeline serve``: the HTTP API and admin console, with the database migrated first and, with
``--with-daemon``, a ``dagster-daemon`` next to it; it re-executes itself with the ``.env`` and Dagster variables."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from rag_pipeline.cli.arguments import int_between
from rag_pipeline.cli.errors import error, guarded
from rag_pipeline.contracts.errors import EXIT_USER_ERROR
from rag_pipeline.settings import project_root

CODE_MODULE = "rag_pipeline.definitions"
DAEMON_START_WAIT_S = 180.0
"""How long ``serve --expect-daemon`` waits for the daemon started next to it before warning."""


def dagster_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` completed with ``DAGSTER_HOME`` and ``RAG_DAGSTER_PG_URL``; ``ValueError`` without an instance."""
    from rag_pipeline.storage import embedded_server  # noqa: PLC0415 - the CLI stays light
    from rag_pipeline.storage.engine import dagster_database_url  # noqa: PLC0415

    env = dict(os.environ if environ is None else environ)
    if not env.get("DAGSTER_HOME"):
        if not (project_root() / "dagster.yaml").is_file():
            raise ValueError("DAGSTER_HOME is not set and the project folder has no dagster.yaml: run "
                             "`rag-pipeline db start` in the project (it writes .env) or export DAGSTER_HOME")
        env["DAGSTER_HOME"] = str(project_root())
    if stale := embedded_server.stale_env_problem(env, project_root()):
        raise ValueError(stale)
    if not env.get("RAG_DAGSTER_PG_URL"):
        env["RAG_DAGSTER_PG_URL"] = dagster_database_url()
    return env


def _completed_environment() -> dict[str, str] | None:
    """The environment this process lacks (``.env``, then the Dagster variables), or None."""
    from dotenv import dotenv_values  # noqa: PLC0415

    env_file = project_root() / ".env"
    values = dotenv_values(env_file) if env_file.is_file() else {}
    missing = {k: v for k, v in values.items() if v is not None and k not in os.environ}
    if missing:
        return {**os.environ, **missing}
    env = dagster_environment()
    return env if env != dict(os.environ) else None


def start_daemon(env: Mapping[str, str]) -> subprocess.Popen:
    """``dagster-daemon run -m rag_pipeline.definitions`` on ``env``'s DAGSTER_HOME; the caller stops it."""
    return subprocess.Popen([str(Path(sys.executable).with_name("dagster-daemon")), "run", "-m", CODE_MODULE],
                            cwd=env["DAGSTER_HOME"], env={"PYTHONWARNINGS": "ignore::FutureWarning", **env},
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)


def local_daemon(dagster_home: str | os.PathLike) -> int | None:
    """The pid of a Dagster daemon process of ``dagster_home`` on this machine (None: none runs)."""
    import psutil  # noqa: PLC0415

    want = os.path.realpath(dagster_home)
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["status"] == psutil.STATUS_ZOMBIE or "run" not in cmdline or not any(
                Path(arg).name == "dagster-daemon" or arg == "dagster._daemon" for arg in cmdline):
            continue
        try:
            home = proc.environ().get("DAGSTER_HOME") or proc.cwd()
        except psutil.Error:  # gone meanwhile, or another user's: not ours
            continue
        if os.path.realpath(home) == want:
            return proc.pid
    return None


def wait_for_daemon(timeout_s: float = DAEMON_START_WAIT_S, interval_s: float = 3.0) -> bool:
    """Wait until a Dagster daemon picks queued runs up or ``timeout_s`` passed (then warn); whether one does."""
    from rag_pipeline.service.queued_runs import queue_status  # noqa: PLC0415
    from rag_pipeline.storage.engine import get_engine  # noqa: PLC0415

    deadline = time.monotonic() + timeout_s
    while not (status := queue_status(get_engine)).daemon_running:
        if time.monotonic() >= deadline:
            print(f"rag-pipeline: warning: still none after {timeout_s:.0f} s: {status.message}", file=sys.stderr,
                  flush=True)
            return False
        time.sleep(interval_s)
    print("rag-pipeline: the Dagster daemon is up: queued evaluation runs start", file=sys.stderr, flush=True)
    return True


SELF_MODULE = "rag_pipeline.cli"  # the package's __main__: `-m rag_pipeline.cli.main` warns it is imported twice


def serve(host: str, port: int, *, with_daemon: bool = False, expect_daemon: bool = False) -> int:
    """Serve the API and console on ``host:port`` until interrupted, with or waiting for a Dagster daemon."""
    from rag_pipeline.service.queued_runs import queue_status  # noqa: PLC0415 - FastAPI and the database for serve only
    from rag_pipeline.storage.engine import get_engine  # noqa: PLC0415
    from rag_pipeline.web.server import ServeRefused, check, run  # noqa: PLC0415

    check(host)
    try:
        env = _completed_environment()
    except ValueError as exc:
        raise ServeRefused(str(exc)) from None
    if env is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        argv = [sys.executable, "-m", SELF_MODULE, "serve", "--host", host, "--port", str(port)]
        os.execve(sys.executable, [*argv, *(["--with-daemon"] if with_daemon else []),
                                   *(["--expect-daemon"] if expect_daemon else [])], env)
    get_engine()
    home = os.environ["DAGSTER_HOME"]
    daemon = None
    status = queue_status(get_engine)
    if with_daemon and local_daemon(home) is None:
        daemon = start_daemon(os.environ)
        print(f"rag-pipeline: started a Dagster daemon (pid {daemon.pid}) on DAGSTER_HOME={home}", file=sys.stderr)
    elif with_daemon:
        print("rag-pipeline: a Dagster daemon is already running on this instance; not starting another",
              file=sys.stderr)
    elif not status.daemon_running and expect_daemon:
        print("rag-pipeline: waiting for the Dagster daemon being started next to the server (make dev's `dagster "
              "dev`); queued evaluation runs start once it is up", file=sys.stderr)
        threading.Thread(target=wait_for_daemon, name="rag-daemon-wait", daemon=True).start()
    elif not status.daemon_running:
        print(f"rag-pipeline: warning: {status.message}", file=sys.stderr)
    try:
        run(host, port, daemon)
    finally:
        if daemon is not None:
            daemon.terminate()
            try:
                daemon.wait(timeout=30)
            except subprocess.TimeoutExpired:
                daemon.kill()
    return 0


@guarded()
def cmd_serve(args: argparse.Namespace) -> int:
    from rag_pipeline.web.server import ServeRefused  # noqa: PLC0415 - FastAPI for this command only

    try:
        return serve(args.host, args.port, with_daemon=args.with_daemon, expect_daemon=args.expect_daemon)
    except ServeRefused as exc:  # a non-loopback address without a token, no Dagster instance
        error(exc)
        return EXIT_USER_ERROR


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve",
        description="Serve the HTTP API and the admin console under uvicorn. Loopback only unless "
                    "RAG_API_TOKEN is set. Evaluations run as Dagster runs: a Dagster daemon must "
                    "run on the same DAGSTER_HOME (make dev, or --with-daemon).")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; any other address "
                                                       "needs RAG_API_TOKEN)")
    p.add_argument("--port", type=int_between(1, 65535), default=8000, help="port (default 8000)")
    p.add_argument("--with-daemon", action="store_true", help="start a Dagster daemon next to the server when none "
                                                              "is running on the instance (stopped with the server)")
    p.add_argument("--expect-daemon", action="store_true",
                   help="a Dagster daemon is being started next to the server (make dev's `dagster dev`): wait for "
                        "it in the background, and warn only if none is up after 3 minutes")
    p.set_defaults(func=cmd_serve)
