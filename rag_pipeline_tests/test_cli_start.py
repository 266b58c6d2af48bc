"""What ``rag-pipeline`` loads to start: the listing imports no command module, a command only its own."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys

import pytest

from rag_pipeline.cli import build_parser, main
from rag_pipeline.cli.commands import COMMANDS

PROBE = """
import json, sys
from rag_pipeline.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
loaded = sorted(name for name in sys.modules if name.startswith("rag_pipeline.cli.") or name.split(".")[0] in
                ("sqlalchemy", "numpy", "pydantic", "scipy", "httpx"))
print(json.dumps(loaded), file=sys.stderr)
"""


def loaded_by(*argv: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120,
                          check=True)
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def help_text(argv: list[str], parser_command: str | None) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        build_parser(parser_command).parse_args([*argv, "--help"])
    return out.getvalue()


def test_the_listing_loads_no_command_module_nor_a_heavy_library() -> None:
    assert loaded_by("--help") == {"rag_pipeline.cli.commands", "rag_pipeline.cli.main"}


def test_a_command_loads_its_own_module_only() -> None:
    loaded = loaded_by("trec", "--help")
    assert "rag_pipeline.cli.trec" in loaded
    others = {f"rag_pipeline.cli.{module}" for module, _ in COMMANDS.values()} - {"rag_pipeline.cli.trec"}
    assert not loaded & others, sorted(loaded & others)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_commands_own_parser_equals_the_whole_parsers(command: str) -> None:
    assert help_text([command], command) == help_text([command], None)
    assert help_text([], command) == help_text([], None), "the listing does not depend on the command"


def test_every_registered_command_is_listed_with_its_summary() -> None:
    listing = help_text([], None)
    for name, (_, summary) in COMMANDS.items():
        assert f"    {name}" in listing and summary.split()[0] in listing


def test_an_unknown_command_is_refused_with_the_list(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["no-such-command"])
    assert exc.value.code == 2 and "invalid choice: 'no-such-command'" in capsys.readouterr().err
