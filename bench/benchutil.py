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
