"""``rag-pipeline doctor``: one line per check with the fix; exit 0 when nothing fails, 1 otherwise."""

from __future__ import annotations

import argparse

from rag_pipeline.analysis.text_table import text_table
from rag_pipeline.cli.errors import guarded
from rag_pipeline.service.environment import Check, run_checks


def render(checks: list[Check]) -> str:
    """The table of checks, each not-``OK`` line followed by its fix, then the verdict."""
    rows = []
    for check in checks:
        rows.append([check.status, check.name, check.detail])
        if check.status != "OK" and check.fix:
            rows.append(["", "", f"fix: {check.fix}"])
    failed = sum(c.status == "FAIL" for c in checks)
    warned = sum(c.status == "WARN" for c in checks)
    verdict = (f"{failed} check(s) FAIL: fix them first" if failed else
               f"ready ({warned} warning(s))" if warned else "ready")
    return text_table(None, rows) + "\n" + verdict


@guarded()
def cmd_doctor(_args: argparse.Namespace) -> int:
    checks = run_checks()
    print(render(checks))
    return 1 if any(c.status == "FAIL" for c in checks) else 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``doctor`` to the ``rag-pipeline`` sub-commands."""
    p = sub.add_parser("doctor")
    p.set_defaults(func=cmd_doctor)
