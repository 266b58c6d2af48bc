"""The process that runs an evaluation run (host, pid, start time: pids are reused), recorded on the run row and
named when that process is lost. Whether it is lost is told by the run's heartbeat in the database, never by
looking the pid up: the process may run on another machine (docs/failure-behaviour.md)."""

from __future__ import annotations

import functools
import socket
from dataclasses import dataclass

import psutil


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
