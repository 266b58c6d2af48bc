"""A real ``rag-pipeline serve`` process (and a real Dagster daemon) for the web tests.

:func:`start_server` runs ``python -m rag_pipeline.cli serve --host H --port P`` with the test session's
database and a Dagster instance in ``dagster_home`` (a copy of the repo's ``dagster.yaml``: Postgres storage, the
run queue), waits for ``/healthz`` and stops it afterwards. :func:`start_daemon` runs ``dagster-daemon run`` on
that instance (the queue, sensors) and waits for its heartbeat.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fresh_dagster_database_url() -> str:
    """A new, empty Dagster storage database on the session's server: no daemon of another test heartbeats in it
    (they all share the ``dagster`` database), so "no daemon runs" is true there."""
    import uuid

    import sqlalchemy as sa

    from rag_pipeline.storage.engine import dagster_database_url

    shared = sa.make_url(dagster_database_url())
    name = f"dagster_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(shared, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    finally:
        admin.dispose()
    return shared.set(database=name).render_as_string(hide_password=False)


def dagster_env(dagster_home: Path, datasets_dir: Path, *, fresh_storage: bool = False,
                **extra: str) -> dict[str, str]:
    """The environment of a server/daemon process: this session's database, the Dagster instance of
    ``dagster_home`` (created from the repo's dagster.yaml) and its own queue of evaluation runs (no other test's
    daemon runs them), an empty datasets folder for the sensor;
    ``fresh_storage``: Dagster's storage in a database of its own (:func:`fresh_dagster_database_url`)."""
    from rag_pipeline.storage.engine import dagster_database_url

    dagster_home.mkdir(parents=True, exist_ok=True)
    if not (dagster_home / "dagster.yaml").exists():
        shutil.copy(ROOT / "dagster.yaml", dagster_home / "dagster.yaml")
    datasets_dir.mkdir(parents=True, exist_ok=True)
    storage = fresh_dagster_database_url() if fresh_storage else dagster_database_url()
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home), "RAG_DAGSTER_PG_URL": storage,
           "RAG_DATASETS_DIR": str(datasets_dir), "RAG_EVALUATION_QUEUE": str(dagster_home),
           "PYTHONWARNINGS": "ignore::FutureWarning",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.update(extra)
    return env


def get_json(url: str, timeout: float = 10, headers: dict | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def _stop(proc: subprocess.Popen, timeout: float = 30, *, group: bool = False) -> None:
    """SIGTERM, then SIGKILL to what is left. ``group``: ``proc`` was started in a session of its own (the server,
    the daemon) and goes with its whole process group, even when a test has killed it already: its Dagster code
    server (``dagster api grpc``, which ignores SIGTERM) outlived it otherwise."""

    def send(sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(proc.pid, sig)
            elif proc.poll() is None:
                proc.send_signal(sig)

    send(signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=timeout)
    send(signal.SIGKILL)
    proc.wait(timeout=10)


@contextlib.contextmanager
def start_server(env: dict[str, str], *, host: str = "127.0.0.1", log: Path, timeout: float = 180,
                 ready: bool = True, extra_args: tuple[str, ...] = ()) -> Iterator[tuple[str, subprocess.Popen]]:
    """Run ``rag-pipeline serve`` on a free port; yields (base URL, process). ``ready``: wait for /healthz."""
    port = free_port()
    out = open(log, "ab")  # noqa: SIM115 - handed to the child, closed below
    proc = subprocess.Popen([sys.executable, "-m", "rag_pipeline.cli", "serve", "--host", host, "--port",
                             str(port), *extra_args], env=env, cwd=env.get("DAGSTER_HOME"), stdout=out,
                            stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://{'127.0.0.1' if host in ('0.0.0.0', '127.0.0.1') else host}:{port}"
    try:
        deadline = time.monotonic() + timeout
        while ready:
            if proc.poll() is not None:
                raise RuntimeError(f"rag-pipeline serve exited {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if get_json(base + "/healthz", timeout=5)[0] in (200, 503):
                    break
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"rag-pipeline serve did not answer in {timeout} s:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield base, proc
    finally:
        _stop(proc, group=True)
        out.close()


@contextlib.contextmanager
def start_daemon(env: dict[str, str], *, log: Path, timeout: float = 240) -> Iterator[subprocess.Popen]:
    """Run ``dagster-daemon run -m rag_pipeline.definitions`` on the instance of ``env`` until its queue daemon
    has sent a heartbeat."""
    subprocess.run([sys.executable, "-m", "rag_pipeline.defs.instance"], env=env, cwd=env["DAGSTER_HOME"],
                   check=True, capture_output=True, timeout=300)  # the rag_db pool, as `db start` does
    out = open(log, "ab")  # noqa: SIM115
    proc = subprocess.Popen([str(Path(sys.executable).with_name("dagster-daemon")), "run", "-m",
                             "rag_pipeline.definitions"], env=env, cwd=env["DAGSTER_HOME"], stdout=out,
                            stderr=subprocess.STDOUT, start_new_session=True)
    check = ("import dagster as dg, time, json; i = dg.DagsterInstance.get(); "
             "b = i.get_daemon_heartbeats().get('QUEUED_RUN_COORDINATOR'); "
             "print(json.dumps(b is not None and time.time() - b.timestamp < 60))")
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"dagster-daemon exited {proc.returncode}:\n{log.read_text()[-3000:]}")
            probe = subprocess.run([sys.executable, "-c", check], env=env, cwd=env["DAGSTER_HOME"],
                                   capture_output=True, text=True, timeout=120)
            if probe.stdout.strip().endswith("true"):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"no daemon heartbeat in {timeout} s:\n{log.read_text()[-3000:]}")
            time.sleep(3)
        yield proc
    finally:
        _stop(proc, group=True)
        out.close()
