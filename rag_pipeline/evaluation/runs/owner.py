"""The process that runs an evaluation run (host, pid, start time: pids are reused), recorded on the run row so a
``running`` row whose process on this host is gone can be told apart (:func:`is_gone`; docs/failure-behaviour.md)."""

from __future__ import annotations

import functools
import socket
from dataclasses import dataclass

import psutil

# start times are read from /proc in clock ticks: two readings of one process differ by far less than this
_SAME_START_S = 1.0


@dataclass(frozen=True)
class Owner:
    host: str
    pid: int
    started_at: float  # seconds since the epoch

    def __str__(self) -> str:
        return f"pid {self.pid} on {self.host}"


@functools.cache
def host() -> str:
    return socket.gethostname()


def this_process() -> Owner:
    """The current process (its pid is read every time: a forked child is another owner)."""
    me = psutil.Process()
    return Owner(host(), me.pid, me.create_time())


def is_gone(owner: Owner) -> bool:
    """True when ``owner`` ran on this host and no process with its pid and start time exists any more; False
    when it is alive or ran on another host (not known here)."""
    if owner.host != host():
        return False
    try:
        process = psutil.Process(owner.pid)
        started = process.create_time()
        if process.status() == psutil.STATUS_ZOMBIE:  # ended, not yet reaped by its parent
            return True
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:  # e.g. access denied: the process exists
        return False
    return abs(started - owner.started_at) > _SAME_START_S


def gone_reason(owner: Owner) -> str:
    return (f"its process ({owner}) ended without recording the outcome: it was killed (kill -9, out of memory) "
            "or failed while the database was unreachable; evaluate again")
