"""The layout stays what docs/development.md's map says: layered stage packages, thin front ends, no Dagster on import.

Layers, each importing only the ones before it: settings → contracts → storage → knowledge_base → retrieval →
evaluation → answers → analysis → service → front ends (cli, defs + definitions, web). Front ends import any
layer, never each other (one vetted exception: ``rag-pipeline serve`` starts the web front end), and hold no SQL.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rag_pipeline_tests.source_helpers import parse_source

PACKAGE = Path(__file__).resolve().parents[1] / "rag_pipeline"
LAYERS = ["settings", "contracts", "storage", "knowledge_base", "retrieval", "evaluation", "answers", "analysis",
          "service"]
FRONT_ENDS = {"cli", "defs", "definitions", "web"}
DAGSTER_FRONT_END = {"defs", "definitions"}
# (importer, imported) → why one front end may import another
FRONT_END_BRIDGES = {
    ("rag_pipeline.cli.serve", "rag_pipeline.web.server"): "the `serve` command starts the HTTP front end "
                                                           "(imported inside the command, so the CLI stays light)",
}
# Modules outside defs/ that use dagster → why. The HTTP front end (web/) does not: it queues run rows, which the
# ``queued_evaluations`` sensor of defs/ turns into Dagster runs (checked below).
def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        if "migrations" in rel.parts:
            continue
        name = ".".join(rel.parts).removesuffix(".__init__")
        found[name] = path
    return found


def _top(module: str) -> str:
    """The layer of a module: ``rag_pipeline.<top>...``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _imports(path: Path) -> set[str]:
    tree = parse_source(path.read_text(encoding="utf-8"), str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return {n for n in names if n.startswith("rag_pipeline")}


def test_the_layout_has_the_stage_packages():
    modules = _modules()
    for package in [*LAYERS[1:], "cli", "defs"]:
        assert f"rag_pipeline.{package}" in modules, f"missing package rag_pipeline/{package}/"


def test_each_layer_imports_only_the_layers_before_it():
    rank = {name: i for i, name in enumerate(LAYERS)}
    problems = []
    for module, path in _modules().items():
        top = _top(module)
        for imported in _imports(path):
            other = _top(imported)
            if not other or other == top:
                continue
            if top in FRONT_ENDS:
                bridged = (module, imported) in FRONT_END_BRIDGES or (module, imported.rsplit(".", 1)[0]) in \
                    FRONT_END_BRIDGES
                both_dagster = top in DAGSTER_FRONT_END and other in DAGSTER_FRONT_END
                if other in FRONT_ENDS and not bridged and not both_dagster:
                    problems.append(f"{module} (a front end) imports the front end {imported}")
                continue
            if other in FRONT_ENDS or rank.get(other, -1) >= rank.get(top, -1):
                problems.append(f"{module} ({top}) imports {imported} ({other}), which is not below it")
    assert not problems, "\n".join(sorted(problems))


def test_front_ends_hold_no_sql():
    sql = re.compile(r"\b(SELECT|INSERT INTO|UPDATE|DELETE FROM)\b|\bsa\.text\(|(?<![\w.])text\(|\.execute\(")
    offenders = []
    for module, path in _modules().items():
        if _top(module) in FRONT_ENDS:
            offenders += [f"{module}: {m.group(0)!r}" for m in sql.finditer(path.read_text(encoding="utf-8"))]
    assert not offenders, "SQL belongs in the stage packages:\n" + "\n".join(offenders)


@pytest.fixture(scope="module")
def imports_in_a_fresh_interpreter() -> dict:
    """One fresh interpreter (a spawn costs seconds): what building the CLI's parser loads (of dagster, fastapi
    and the web front end), then each non-Dagster module imported in turn (the first one after which dagster is
    loaded), then whether importing the Dagster front end loads dagster."""
    names = sorted(m for m in _modules() if _top(m) not in DAGSTER_FRONT_END)
    code = ("import importlib, json, sys\n"
            "from rag_pipeline.cli.main import build_parser\n"
            "build_parser()\n"
            "cli = sorted(n for n in ('dagster', 'fastapi', 'rag_pipeline.web') if n in sys.modules)\n"
            f"names = {json.dumps(names)}\n"
            "loaded = []\n"
            "for n in names:\n"
            "    importlib.import_module(n)\n"
            "    if 'dagster' in sys.modules:\n"
            "        loaded.append(n)\n"
            "        break\n"
            "import rag_pipeline.defs.instance\n"
            "print(json.dumps({'cli': cli, 'names': len(names), 'loaded': loaded,\n"
            "                  'defs': 'dagster' in sys.modules}))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=PACKAGE.parent)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_no_module_outside_the_dagster_front_end_imports_dagster(imports_in_a_fresh_interpreter):
    """Import every non-Dagster module in a fresh interpreter: ``dagster`` must not be loaded (CLI start-up,
    HTTP workers and library use stay light)."""
    assert imports_in_a_fresh_interpreter["names"] > 40
    assert imports_in_a_fresh_interpreter["loaded"] == [], f"imports dagster: {imports_in_a_fresh_interpreter}"


def test_no_module_of_the_web_front_end_imports_dagster():
    """No module outside defs/ imports dagster (``doctor`` reads the sensor's recorded ticks)."""
    importers = set()
    for module, path in _modules().items():
        tree = parse_source(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            if any(n == "dagster" or n.startswith("dagster.") for n in names):
                importers.add(module)
    outside = {m for m in importers if _top(m) not in DAGSTER_FRONT_END}
    assert outside == set(), f"modules outside defs/ importing dagster: {sorted(outside)}"


def test_the_cli_does_not_load_the_web_front_end_or_dagster(imports_in_a_fresh_interpreter):
    """``rag-pipeline --help`` and every command but ``serve`` stay light: no FastAPI, no Dagster."""
    assert imports_in_a_fresh_interpreter["cli"] == [], imports_in_a_fresh_interpreter


def test_the_dagster_modules_do_import_dagster(imports_in_a_fresh_interpreter):
    """The check above can fail: the Dagster front end really loads dagster."""
    assert imports_in_a_fresh_interpreter["defs"] is True
