"""Shared by the benchmarks: best-of-N timing and the machine line every result is recorded with."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def best_time(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Fastest wall time of ``repeats`` calls of ``fn`` and the last result."""
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def cpu_model() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown"


def machine_line() -> str:
    """``machine: cpu=... cores=... load1=... python=... numpy=...``"""
    load = f"{os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else "n/a"
    return (f"machine: cpu={cpu_model()!r} cores={os.cpu_count()} load1={load} "
            f"python={platform.python_version()} numpy={np.__version__}")


def postgres_cpu_seconds(postmaster) -> float:
    """CPU seconds of a PostgreSQL server so far: its postmaster (a ``psutil.Process``), the live backends and the
    backends it has reaped."""
    import psutil

    t = postmaster.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for child in postmaster.children():
        try:
            c = child.cpu_times()
            total += c.user + c.system
        except psutil.NoSuchProcess:
            pass
    return total


class DagsterQueue:
    """What the benches drive as a click: the API's queue (:func:`rag_pipeline.service.queued_runs.queue_evaluations`,
    which the daemon's ``queued_evaluations`` sensor turns into a Dagster run), the Dagster instance of ``env`` and a
    ``dagster-daemon`` started on it (:mod:`rag_pipeline.cli.serve`)."""

    def __init__(self, env: dict[str, str]):
        from rag_pipeline.cli.serve import dagster_environment

        self._env = dagster_environment(env)
        self._instance = None

    def environment(self) -> dict[str, str]:
        return self._env

    def instance(self):
        import dagster as dg

        self._instance = self._instance or dg.DagsterInstance.get()
        return self._instance

    def launch_evaluations(self, engine, knowledge_base: str, dataset_id: str, strategies=None):
        from rag_pipeline.service.queued_runs import queue_evaluations

        return queue_evaluations(engine, knowledge_base, dataset_id, strategies)

    def queue_status(self, max_age_s: float = 0):  # noqa: ARG002 - the old signature
        from rag_pipeline.service.queued_runs import queue_status
        from rag_pipeline.storage.engine import get_engine

        return queue_status(get_engine)

    def start_daemon(self, log: Path | None = None):
        import subprocess
        import sys

        out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - handed to the child
        return subprocess.Popen([str(Path(sys.executable).with_name("dagster-daemon")), "run", "-m",
                                 "rag_pipeline.definitions"], cwd=self._env["DAGSTER_HOME"],
                                env={"PYTHONWARNINGS": "ignore::FutureWarning", **self._env}, stdout=out,
                                stderr=subprocess.STDOUT)
