"""Is a Dagster daemon running on a ``DAGSTER_HOME``? Checked on this machine's processes, not assumed from a
heartbeat.

A daemon's heartbeat stays in the instance after the daemon dies, so a fresh-looking heartbeat alone can
describe a daemon killed a minute ago. A daemon counts as running when:

- a ``dagster-daemon run`` (or ``python -m dagster._daemon run``, as ``dagster dev`` starts it) process of this
  ``DAGSTER_HOME`` (its environment's, else its working folder) runs on this machine; or
- no such process exists but the heartbeat is younger than :data:`REMOTE_HEARTBEAT_S` — a daemon on another
  machine sharing the instance (Dagster's daemons beat every 30 s). A local daemon that died is therefore seen
  as stopped at most that long after its last beat.

``rag-pipeline serve --with-daemon`` starts a daemon unless a local one runs (:func:`local_daemon`), whatever the
heartbeat says.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import psutil

REMOTE_HEARTBEAT_S = 45.0


@dataclass(frozen=True)
class DaemonState:
    running: bool
    pid: int | None = None  # the local daemon process
    detail: str | None = None  # why it counts as stopped


def _is_daemon(cmdline: list[str]) -> bool:
    if "run" not in cmdline:
        return False
    return any(Path(arg).name == "dagster-daemon" or arg == "dagster._daemon" for arg in cmdline)


def local_daemon(dagster_home: str | os.PathLike) -> int | None:
    """The pid of a Dagster daemon process of ``dagster_home`` on this machine, or None."""
    want = os.path.realpath(dagster_home)
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE or not _is_daemon(proc.info["cmdline"] or []):
            continue
        try:
            home = proc.environ().get("DAGSTER_HOME") or proc.cwd()
        except psutil.Error:  # gone meanwhile, or another user's: not ours
            continue
        if os.path.realpath(home) == want:
            return proc.pid
    return None


def daemon_state(dagster_home: str | os.PathLike, heartbeat_age_s: float | None) -> DaemonState:
    """Whether a daemon runs on ``dagster_home`` (see the module docstring); ``heartbeat_age_s``: seconds since
    its queue daemon's last heartbeat (None: never)."""
    pid = local_daemon(dagster_home)
    if pid is not None:
        return DaemonState(True, pid)
    if heartbeat_age_s is not None and heartbeat_age_s < REMOTE_HEARTBEAT_S:
        return DaemonState(True)
    if heartbeat_age_s is None:
        return DaemonState(False, detail="no daemon has ever sent a heartbeat")
    return DaemonState(False, detail=f"no daemon process on this machine; the last heartbeat is {heartbeat_age_s:.0f} "
                                     "s old")
