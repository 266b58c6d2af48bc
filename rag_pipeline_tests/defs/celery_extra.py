"""The `celery` extra (``.[dev]`` pulls it in, so ``make test`` installs it): a test that needs it skips without it on a
developer's machine and fails under CI, where a missing extra is a broken install rather than a choice."""

from __future__ import annotations

import importlib.util
import os

import pytest


def require_celery_extra() -> None:
    if importlib.util.find_spec("dagster_celery") is not None:
        return
    message = "the `celery` extra is not installed (pip install -e '.[dev]' pulls it in)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)
