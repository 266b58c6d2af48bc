"""A Dagster daemon's liveness is checked, not assumed: ``serve --with-daemon`` restarted right after a daemon died
starts a new one (its process is looked for, whatever the dead daemon left behind), and ``/healthz`` says
``daemon_running: false`` as soon as the daemon the server started has exited."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest
import requests

from rag_pipeline.cli.serve import local_daemon
from rag_pipeline_tests.web.server_helpers import dagster_env, start_daemon, start_server

pytestmark = [pytest.mark.db,  # the server and the daemon connect to the session's database
              pytest.mark.slow]  # two real daemons and a server, each a few seconds to start


def _queue(base: str) -> dict:
    return requests.get(base + "/healthz", timeout=60).json()["queue"]


def test_serve_with_daemon_after_a_daemon_died_starts_one_and_sees_it_die(engine, tmp_path: Path) -> None:
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n", encoding="utf-8")
    env = dagster_env(home, tmp_path / "datasets")
    with start_daemon(env, log=tmp_path / "first-daemon.log") as first:
        assert local_daemon(home) == first.pid
        first.send_signal(signal.SIGKILL)  # its heartbeat stays behind, seconds old
        first.wait(timeout=30)
    assert local_daemon(home) is None
    log = tmp_path / "server.log"
    with start_server(env, log=log, extra_args=("--with-daemon",)) as (base, _proc):
        started = re.search(r"started a Dagster daemon \(pid (\d+)\)", log.read_text())
        assert started, log.read_text()[-2000:]
        pid = int(started.group(1))
        deadline = time.monotonic() + 180  # its sensor's first tick, once the code location is loaded
        while _queue(base) != {"daemon_running": True, "message": None}:
            assert time.monotonic() < deadline, _queue(base)
            time.sleep(1)
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 20
        while (queue := _queue(base))["daemon_running"]:
            assert time.monotonic() < deadline, "the dead daemon still reads as running"
            time.sleep(1)
        assert f"the daemon this server started (pid {pid}) exited" in queue["message"], queue
