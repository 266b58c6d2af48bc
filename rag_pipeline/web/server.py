"""Running the HTTP service under uvicorn (``rag-pipeline serve``): the bind check, the database and Dagster set-up
before the first request, and an optional Dagster daemon next to it. Started without the project's ``.env``
values or the Dagster variables, the server re-executes itself with them (its ``os.environ`` is never changed).
"""

from __future__ import annotations

import os
import sys
import threading
import time

import uvicorn
from dotenv import dotenv_values

from rag_pipeline.service.liveness.daemon import local_daemon
from rag_pipeline.settings import project_root
from rag_pipeline.storage.engine import get_engine
from rag_pipeline.web.hosts import check_allowed_hosts
from rag_pipeline.web.security import BindRefused, check_bind


class ServeRefused(ValueError):  # noqa: N818 - a refusal the user is shown, not a crash
    """Why ``serve`` does not start (a non-loopback address without a token, no Dagster instance)."""


def _completed_environment() -> dict[str, str] | None:
    """The environment this process lacks, or None: first ``<project>/.env`` (set variables win, as the ``dagster``
    command does), then the Dagster variables (once ``.env`` is in the environment, they derive from it)."""
    from rag_pipeline.web.launcher import dagster_environment  # noqa: PLC0415 - after the bind check

    env_file = project_root() / ".env"
    values = dotenv_values(env_file) if env_file.is_file() else {}
    missing = {k: v for k, v in values.items() if v is not None and k not in os.environ}
    if missing:
        return {**os.environ, **missing}
    env = dagster_environment()
    return env if env != dict(os.environ) else None


DAEMON_START_WAIT_S = 180.0
"""How long ``serve --expect-daemon`` waits for the heartbeat of the daemon started next to it before warning."""


def wait_for_daemon(launcher, timeout_s: float = DAEMON_START_WAIT_S, interval_s: float = 3.0) -> bool:
    """Wait until a Dagster daemon heartbeats on the launcher's instance (say so on stderr) or ``timeout_s`` passed
    (then warn, with the fix); returns whether one runs. What ``make dev`` needs: its ``dagster dev`` starts the
    daemon while the server starts, so "no daemon is running" at start-up would be a false alarm."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = launcher.queue_status(max_age_s=0)
        if status.daemon_running:
            print("rag-pipeline: the Dagster daemon is up: queued evaluation runs start", file=sys.stderr, flush=True)
            return True
        if time.monotonic() >= deadline:
            print(f"rag-pipeline: warning: still none after {timeout_s:.0f} s: {status.message}", file=sys.stderr,
                  flush=True)
            return False
        time.sleep(interval_s)


def serve(host: str = "127.0.0.1", port: int = 8000, *, with_daemon: bool = False,
          expect_daemon: bool = False) -> int:
    """Serve the API and console on ``host:port`` until interrupted, the database migrated and the Dagster instance
    opened first; ``with_daemon``: start a Dagster daemon when none is alive (stopped on exit); ``expect_daemon``:
    one is being started next to the server (``make dev``): wait for it in the background instead of warning."""
    try:
        check_bind(host)  # before Dagster is even imported: a refusal is immediate
        check_allowed_hosts()
    except BindRefused as exc:
        raise ServeRefused(str(exc)) from None
    from rag_pipeline.web.app import create_app  # noqa: PLC0415 - after the bind check (a refusal is immediate)
    from rag_pipeline.web.launcher import Launcher, LaunchError  # noqa: PLC0415

    try:
        env = _completed_environment()
        if env is not None:
            sys.stdout.flush()
            sys.stderr.flush()
            argv = [sys.executable, "-m", "rag_pipeline.cli.main", "serve", "--host", host, "--port", str(port)]
            os.execve(sys.executable, [*argv, *(["--with-daemon"] if with_daemon else []),
                                       *(["--expect-daemon"] if expect_daemon else [])], env)
        get_engine()
        launcher = Launcher(os.environ)
        launcher.instance()
        launcher.load_code_in_background()  # the code location that evaluation runs are created from
    except LaunchError as exc:
        raise ServeRefused(str(exc)) from None
    daemon = None
    status = launcher.queue_status(max_age_s=0)
    if with_daemon and local_daemon(launcher.dagster_home()) is None:  # a heartbeat may outlive its daemon
        daemon = launcher.start_daemon()
        print(f"rag-pipeline: started a Dagster daemon (pid {daemon.pid}) on DAGSTER_HOME={launcher.dagster_home()}",
              file=sys.stderr)
    elif with_daemon:
        print("rag-pipeline: a Dagster daemon is already running on this instance; not starting another",
              file=sys.stderr)
    elif not status.daemon_running and expect_daemon:
        print("rag-pipeline: waiting for the Dagster daemon being started next to the server (make dev's `dagster "
              "dev`); queued evaluation runs start once it is up", file=sys.stderr)
        threading.Thread(target=wait_for_daemon, args=(launcher,), name="rag-daemon-wait", daemon=True).start()
    elif not status.daemon_running:
        print(f"rag-pipeline: warning: {status.message}", file=sys.stderr)
    base = f"http://{host if ':' not in host else f'[{host}]'}:{port}"
    print(f"rag-pipeline: API {base}/api/v1 (OpenAPI {base}/docs), console {base}/admin/retrieval-evaluations",
          file=sys.stderr, flush=True)
    try:
        uvicorn.run(create_app(launcher=launcher), host=host, port=port, log_level="info", server_header=False,
                    proxy_headers=False, access_log=True)
    finally:
        if daemon is not None:
            daemon.terminate()
            try:
                daemon.wait(timeout=30)
            except Exception:  # noqa: BLE001 - it is going away either way
                daemon.kill()
    return 0
