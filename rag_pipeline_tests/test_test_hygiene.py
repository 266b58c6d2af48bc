"""Every test can fail: each test function of the suite contains an ``assert`` (not of a constant),
``pytest.raises`` / ``pytest.warns``, or a call of an explicit check helper from :data:`CHECK_HELPERS`; and every
helper of that list defined in the suite itself asserts something. Markers are marks on the tests: a ``db`` or
``slow`` mark has its reason in a comment beside it, and no conftest lists tests by node id."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from rag_pipeline_tests.source_helpers import parse_source

TESTS = Path(__file__).resolve().parent

CHECK_HELPERS = (
    # numpy.testing: raise AssertionError on a mismatch
    "assert_allclose", "assert_array_equal",
    # jsonschema: Draft*Validator.check_schema raises SchemaError for an invalid schema
    "check_schema",
    # helpers of the suite (checked below to contain an assert)
    "_assert_batch_matches", "_assert_same", "assert_vectors_match_direct_encode", "assert_identical",
)
"""Calls that count as a check in a test without an ``assert`` of its own."""

EXPLAINED_MARKS = ("db", "slow")
"""Marks that need a comment saying why, on their line or the line above, in a test module."""

NODE_ID = re.compile(r"rag_pipeline_tests/\S+\.py(::|\[|$)")


def _called_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _is_pytest_check(call: ast.Call) -> bool:
    func = call.func
    return (isinstance(func, ast.Attribute) and func.attr in ("raises", "warns")
            and isinstance(func.value, ast.Name) and func.value.id == "pytest")


def _checks(function: ast.AST) -> bool:
    for node in ast.walk(function):
        if isinstance(node, ast.Assert) and not isinstance(node.test, ast.Constant):
            return True
        if isinstance(node, ast.Call) and (_is_pytest_check(node) or _called_name(node) in CHECK_HELPERS):
            return True
    return False


def _functions(path: Path):
    tree = parse_source(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def _modules() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_test_function_checks_something() -> None:
    modules = [p for p in _modules() if p.name.startswith("test_")]
    assert len(modules) > 40, "the suite was not found"
    empty = [f"{path.relative_to(TESTS.parent)}:{fn.lineno} {fn.name}" for path in modules
             for fn in _functions(path) if fn.name.startswith("test") and not _checks(fn)]
    assert not empty, ("test functions without an assert, pytest.raises/warns or a check helper "
                       f"({', '.join(CHECK_HELPERS)}):\n" + "\n".join(empty))


def test_the_suites_own_check_helpers_assert() -> None:
    defined = {fn.name: (path, fn) for path in _modules() for fn in _functions(path) if fn.name in CHECK_HELPERS}
    assert {"_assert_batch_matches", "_assert_same", "assert_vectors_match_direct_encode",
            "assert_identical"} <= set(defined)
    weak = [f"{path.relative_to(TESTS.parent)}:{fn.lineno} {name}" for name, (path, fn) in defined.items()
            if not any(isinstance(n, ast.Assert) for n in ast.walk(fn))]
    assert not weak, "check helpers that assert nothing:\n" + "\n".join(weak)


def test_the_hygiene_check_catches_a_test_that_cannot_fail() -> None:
    tree = ast.parse("def test_a():\n    run()\n\ndef test_b():\n    assert True\n\n"
                     "def test_c():\n    with pytest.raises(ValueError):\n        run()\n\n"
                     "def test_d():\n    numpy.testing.assert_allclose(a, b)\n")
    verdict = {fn.name: _checks(fn) for fn in tree.body}
    assert verdict == {"test_a": False, "test_b": False, "test_c": True, "test_d": True}


def _marks_without_a_reason(source: str, filename: str = "<test>") -> list[int]:
    """Lines of ``pytest.mark.db`` / ``pytest.mark.slow`` with no comment on that line or the one above."""
    commented = {tok.start[0] for tok in tokenize.generate_tokens(io.StringIO(source).readline)
                 if tok.type == tokenize.COMMENT}
    return sorted(node.lineno for node in ast.walk(parse_source(source, filename))
                  if isinstance(node, ast.Attribute) and node.attr in EXPLAINED_MARKS
                  and isinstance(node.value, ast.Attribute) and node.value.attr == "mark"
                  and isinstance(node.value.value, ast.Name) and node.value.value.id == "pytest"
                  and not commented & {node.lineno, node.lineno - 1})


def test_every_db_and_slow_mark_says_why() -> None:
    bare = [f"{path.relative_to(TESTS.parent)}:{line}" for path in _modules() if path.name.startswith("test_")
            for line in _marks_without_a_reason(path.read_text(encoding="utf-8"), str(path))]
    assert not bare, "db / slow marks without a comment saying why:\n" + "\n".join(bare)


def test_markers_are_marks_not_node_id_lists() -> None:
    listed = [f"{path.relative_to(TESTS.parent)}:{node.lineno} {node.value}" for path in TESTS.rglob("conftest.py")
              for node in ast.walk(parse_source(path.read_text(encoding="utf-8"), str(path)))
              if isinstance(node, ast.Constant) and isinstance(node.value, str) and NODE_ID.match(node.value)]
    assert not listed, "node ids in a conftest (mark the tests instead):\n" + "\n".join(listed)


def test_the_mark_check_catches_a_bare_mark() -> None:
    source = ("import pytest\n\n# a reason\npytestmark = pytest.mark.db\n\n"
              "@pytest.mark.slow\ndef test_a():\n    pass\n\n"
              "@pytest.mark.slow  # a reason\ndef test_b():\n    pass\n\n"
              "@pytest.mark.parametrize('x', [1, pytest.param(2, marks=pytest.mark.db)])\ndef test_c(x):\n    pass\n")
    assert _marks_without_a_reason(source) == [6, 14]
    assert NODE_ID.match("rag_pipeline_tests/web/test_api.py")
    assert NODE_ID.match("rag_pipeline_tests/a/test_b.py::test_c")
    assert not NODE_ID.match("rag_pipeline_tests/data/bad_datasets")
