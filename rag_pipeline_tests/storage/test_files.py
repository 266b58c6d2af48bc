"""The one file writer (:func:`rag_pipeline.storage.files.atomic_output`): a file is replaced whole or left as it
was, the temporary file never stays behind, the target keeps its permissions, and a failed write names the file.

A full disk is a real one: a 64 kB tmpfs (mounting needs root, which CI has; elsewhere that test is skipped
saying so). A file size limit (``RLIMIT_FSIZE``, any user) is the portable stand-in used by the CLI tests."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from rag_pipeline.contracts.errors import EXIT_OUTPUT_NOT_WRITTEN
from rag_pipeline.storage.files import FileWriteError, atomic_output, write_atomic


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_an_error_in_the_block_leaves_the_previous_file_and_no_temporary_file(tmp_path):
    target = tmp_path / "report.json"
    target.write_text("previous\n", encoding="utf-8")
    with pytest.raises(RuntimeError, match="the database went away"), atomic_output(target) as fp:
        fp.write("half a report " * 1000)
        raise RuntimeError("the database went away")
    assert target.read_text(encoding="utf-8") == "previous\n"
    assert _names(tmp_path) == ["report.json"]


def test_a_new_file_is_whole_and_gets_the_usual_permissions(tmp_path):
    umask = os.umask(0o022)
    try:
        write_atomic(tmp_path / "deep" / "er" / "report.json", "{}\n", parents=True)
    finally:
        os.umask(umask)
    target = tmp_path / "deep" / "er" / "report.json"
    assert target.read_text(encoding="utf-8") == "{}\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644, "as open(path, 'w') would make it, not mkstemp's 0600"
    assert _names(target.parent) == ["report.json"]


def test_an_existing_file_keeps_its_permissions(tmp_path):
    target = tmp_path / "draft.json"
    target.write_text("old", encoding="utf-8")
    target.chmod(0o640)
    write_atomic(target, b"new bytes")
    assert target.read_bytes() == b"new bytes"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


def test_a_missing_folder_is_a_write_error_naming_the_file(tmp_path):
    target = tmp_path / "no-such-folder" / "report.json"
    with pytest.raises(FileWriteError) as info:
        write_atomic(target, "x")
    assert str(info.value) == f"{target}: No such file or directory"
    assert info.value.exit_code == EXIT_OUTPUT_NOT_WRITTEN
    assert not target.parent.exists()


_OVER_LIMIT = """
import resource, signal, sys
from rag_pipeline.storage.files import FileWriteError, write_atomic
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1000, resource.RLIM_INFINITY))
try:
    write_atomic(sys.argv[1], "x" * 5000)
except FileWriteError as exc:
    print(exc)
"""


def test_a_write_over_the_file_size_limit_leaves_the_previous_file(tmp_path):
    target = tmp_path / "report.json"
    target.write_text("previous\n", encoding="utf-8")
    out = subprocess.run([sys.executable, "-c", _OVER_LIMIT, str(target)], capture_output=True, text=True,
                         timeout=60, check=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert out.stdout.strip() == f"{target}: File too large", out.stderr
    assert target.read_text(encoding="utf-8") == "previous\n"
    assert _names(tmp_path) == ["report.json"]


@pytest.fixture
def full_disk(tmp_path):
    """A 64 kB tmpfs holding ``report.json`` (its previous content) and a filler that leaves ~8 kB free."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root); the RLIMIT_FSIZE test covers the rest")
    folder = tmp_path / "small"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)], capture_output=True,
                             text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        (folder / "report.json").write_text("previous\n", encoding="utf-8")
        (folder / "filler").write_bytes(b"\0" * (56 * 1024))
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_a_full_disk_leaves_the_previous_file_and_names_it(full_disk):
    target = full_disk / "report.json"
    with pytest.raises(FileWriteError) as info, atomic_output(target) as fp:
        for _ in range(64):
            fp.write("y" * 1024)
    assert str(info.value) == f"{target}: No space left on device"
    assert target.read_text(encoding="utf-8") == "previous\n"
    assert _names(full_disk) == ["filler", "report.json"]


def test_a_given_mode_wins_over_the_existing_one(tmp_path):
    """A file holding a password (``.env``, the listener's file) is 0600 even if it was readable before."""
    target = tmp_path / ".env"
    target.write_text("RAG_DATABASE_URL=old\n", encoding="utf-8")
    target.chmod(0o644)
    write_atomic(target, "RAG_DATABASE_URL=new\n", mode=0o600)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert target.read_text(encoding="utf-8") == "RAG_DATABASE_URL=new\n"
    assert _names(tmp_path) == [".env"]
