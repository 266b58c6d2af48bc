"""FastAPI conventions of the web front end, checked on its source: a GET handler writes nothing (reconciliation
with Dagster runs on the app's timer and on launch), and no web module changes the process environment."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from fastapi.routing import iter_route_contexts

import rag_pipeline.web
from rag_pipeline.web.app import create_app

WEB = Path(rag_pipeline.web.__file__).parent
WRITES = ("queue_evaluations(", "launch_evaluations(", "mark_failed(", "store_uploaded_dataset(", "engine.begin(")
ENV_WRITES = {"setdefault", "update", "pop", "popitem", "clear"}


def test_get_handlers_do_not_write():
    checked = 0
    for ctx in iter_route_contexts(create_app().routes):
        if "GET" in (ctx.methods or ()) and ctx.endpoint.__module__.startswith("rag_pipeline.web"):
            source = inspect.getsource(ctx.endpoint)
            assert not [w for w in WRITES if w in source], f"GET {ctx.path} writes: {ctx.endpoint.__qualname__}"
            checked += 1
    assert checked >= 20


def _environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" and getattr(node.value, "id", "") == "os"


def test_no_web_module_changes_the_environment():
    found = []
    for path in sorted(WEB.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AugAssign) else node.targets if isinstance(node, ast.Delete) else []
            if any(isinstance(t, ast.Subscript) and _environ(t.value) for t in targets):
                found.append(f"{path.name}:{node.lineno}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                    (_environ(node.func.value) and node.func.attr in ENV_WRITES)
                    or node.func.attr in ("putenv", "unsetenv")):
                found.append(f"{path.name}:{node.lineno}")
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("load_dotenv", "load_env_file"):
                found.append(f"{path.name}:{node.lineno}")
    assert not found, f"the web process changes os.environ at {found}"
