"""SQL lives in one place per stage: its query module(s). Elsewhere a stage calls their functions.

A statement is an ``sa.text(...)`` call, an ``exec_driver_sql(...)`` call or a driver ``COPY`` (``.copy("COPY ...")``).
Extend :data:`CHECKED` with a stage and :data:`QUERY_MODULES` with its query module(s) to bring it under the rule.
"""

from __future__ import annotations

import ast
from pathlib import Path

from rag_pipeline_tests.source_helpers import parse_source

PACKAGE = Path(__file__).resolve().parents[1] / "rag_pipeline"
CHECKED = ("settings.py", "contracts", "storage", "knowledge_base", "retrieval", "evaluation", "answers", "analysis",
           "service", "cli", "defs", "definitions.py", "web")
# Paths relative to rag_pipeline/; one ending in "/" is a package of query modules.
QUERY_MODULES = ("storage/queries.py", "knowledge_base/queries/", "retrieval/sql.py", "retrieval/bm25_sql.py",
                 "retrieval/attached_sql.py",
                 "evaluation/queries/", "evaluation/datasets/queries.py", "evaluation/runs/queries.py",
                 "evaluation/runs/case_queries.py",
                 "evaluation/runs/candidate_queries.py", "evaluation/diagnosis/queries.py", "answers/runs/queries.py")
EXEMPT = ("storage/migrations/",)  # Alembic migrations keep their own statements


def _allowed(rel: str) -> bool:
    return any(rel == p or (p.endswith("/") and rel.startswith(p)) for p in QUERY_MODULES + EXEMPT)


def _statements(path: Path) -> list[int]:
    """Lines of the SQL statements executed or built in ``path``."""
    found = []
    for node in ast.walk(parse_source(path.read_text(encoding="utf-8"), str(path))):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        name, owner = node.func.attr, node.func.value
        first = node.args[0] if node.args else None
        if ((name == "text" and isinstance(owner, ast.Name) and owner.id == "sa") or name == "exec_driver_sql"
                or (name == "copy" and isinstance(first, ast.Constant) and str(first.value).startswith("COPY"))):
            found.append(node.lineno)
    return found


def _files(allowed: bool) -> dict[str, list[int]]:
    out = {}
    for stage in CHECKED:
        for path in sorted((PACKAGE / stage).rglob("*.py")) if (PACKAGE / stage).is_dir() else [PACKAGE / stage]:
            rel = path.relative_to(PACKAGE).as_posix()
            if _allowed(rel) == allowed and (lines := _statements(path)):
                out[rel] = lines
    return out


def test_no_sql_statement_outside_the_query_modules():
    misplaced = [f"rag_pipeline/{rel}:{line}" for rel, lines in _files(allowed=False).items() for line in lines]
    assert not misplaced, "SQL outside the query modules; move it into " + ", ".join(QUERY_MODULES) + ":\n" + \
        "\n".join(misplaced)


def test_every_query_module_exists_and_holds_statements():
    placed = _files(allowed=True)
    for module in QUERY_MODULES:
        assert (PACKAGE / module).exists(), module
        assert any(rel == module or rel.startswith(module) for rel in placed), f"{module} holds no statement"
