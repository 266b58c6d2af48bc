"""Hostile user files and names: every one ends in a clear error naming the file or the name, quickly,
with nothing written; junk documents are skipped with a warning; nothing printed carries a raw control character.

Datasets, documents and strategy files go through the one bounded reader (``rag_pipeline/storage/files.py``);
knowledge bases, datasets and strategy versions follow the one name rule (``rag_pipeline/storage/names.py``).
The CLI runs in-process (``rag_pipeline.cli.main``) against the session's real PostgreSQL.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from rag_pipeline.cli.main import main
from rag_pipeline.cli.runs_table import comparison_table
from rag_pipeline.evaluation.datasets.load import DatasetError, load_dataset, parse_dataset
from rag_pipeline.knowledge_base.sources import SourceError, read_folder
from rag_pipeline.retrieval.strategies import (
    PACKAGED_STRATEGIES_FILE,
    Strategy,
    StrategyError,
    load_registry,
)
from rag_pipeline.service import knowledge_bases as kb_service
from rag_pipeline.storage import files
from rag_pipeline.storage.files import FileReadError, read_bounded
from rag_pipeline_tests.eval_helpers import table_counts
from rag_pipeline_tests.reliability_helpers import kb_counts

HOSTILE = ("dev_zero", "fifo", "symlink_to_dev_zero")
TAG = uuid.uuid4().hex[:8]

# The params_hash of every packaged strategy before the name rule replaced the version pattern.
SHIPPED_HASHES = {
    "hybrid-v1": "102c63fbd95eeec2368bd0a7ab7f6bccb41e79d929476a8a3284625a62243b05",
    "vector-v1": "b0305acc66bd878c3b564faf92d50d220733041e6f212ecce980dc16264346fb",
    "keyword-v1": "64706ed6bdf1ac466bf0471166834130e699835f37bde2338aaa22c8bd5a5995",
    "bm25-v1": "6da5cca7150dab6d1aa03ced3d893c5881d5755d0fb7a6aa44b94d98a2e98822",
    "hybrid-bm25-v1": "556743e93557f6f6b61dc7cdf150c9c1019351234c511c93711c2e040c31bbb5",
    "rrf-v1": "a27064db1af39fbad406f08744b05388e1784612e7d870ca689316ced01555b4",
    "vector-minilm-v1": "317df04d2f26886f26faf1d328d78160e94749ef679825704429f89387d1bcbf",
    "hybrid-bm25-minilm-v1": "357b635e35b3cc1640ba511d91e0f67e58c69763617ef07287e2d2e1ba9f217e",
    # the first version with the optional stages (complete_pool, rerank), which leave the hashes above alone
    "hybrid-bm25-rerank-minilm-v1": "a68a10e8a25df6e2dfd54e4d642c2432fb6d510edf9c357c27abb655d50cd860",
    # vector_search: exact (left out of the parameters while hnsw, so the hashes above stay)
    "vector-exact-v1": "28a695cee8ad1c6f2577c8bd32ce549a1d21921752793f47933f3848972ed880",
    "hybrid-bm25-exact-v1": "82068aee7cd9398efd08d76e03690c0659cbbfc205c6406d5e7752d6526dbdd9",
    "vector-minilm-exact-v1": "0e5c441c37f9f142f6cfc9ad790e37dd14a0b70ed92a89dbebf71b43df8e980b",
    "hybrid-bm25-minilm-exact-v1": "98e5b54eb58d2a9e1594ef5e81120e97e53a1141d74f6dd55dec02a89229f1f5",
    "hybrid-bm25-rerank-minilm-exact-v1": "f98d9948d8b79d4bb1d966d4e601fe28e0d73bfd765523e577bd121c4550cb2a",
}
GOOD_CASE = {"case_id": "c1", "question": "how are backups tested?",
             "relevant_chunk_ids": ["00000000-0000-0000-0000-000000000001"], "k": 5}


_WATCHED: set[str] = set()
_OPENED: list[str] = []


def _stop_opening(event: str, args: tuple) -> None:
    """Audit hook (installed once, for the process): an ``open`` of a watched path is recorded and stopped."""
    if event != "open" or not _WATCHED or isinstance(args[0], int) or args[0] is None:
        return
    name = os.fsdecode(args[0])
    if name in _WATCHED or os.path.realpath(name) in _WATCHED:
        _OPENED.append(name)
        raise PermissionError(f"the test stopped an open of the hostile file {name}")


@contextlib.contextmanager
def never_opened(path: Path) -> Iterator[None]:
    """The block must refuse ``path`` without opening it. An open of ``path`` (or of what it links to) is stopped
    before it happens and fails the test, so nothing can block on a FIFO without a writer or read ``/dev/zero``
    forever, and no clock decides (speed is measured in bench/)."""
    if not getattr(sys, "_rag_hostile_hook", False):
        sys.addaudithook(_stop_opening)
        sys._rag_hostile_hook = True  # type: ignore[attr-defined]
    _WATCHED.update({str(path), os.path.realpath(path)})
    _OPENED.clear()
    try:
        yield
    finally:
        _WATCHED.clear()
    assert not _OPENED, f"the hostile file was opened: {_OPENED}"


def hostile(kind: str, folder: Path, name: str) -> Path:
    """``/dev/zero`` itself, a FIFO without a writer, or a symlink to ``/dev/zero`` (named ``name`` in ``folder``)."""
    if kind == "dev_zero":
        return Path("/dev/zero")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    return path


def cli(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        rc = main(list(args))
    except SystemExit as exc:
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


def assert_clear_user_error(rc: int, out: str, err: str, *fragments: str) -> None:
    assert rc == 2, (rc, out, err)
    assert err.startswith("rag-pipeline: error: "), err
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    for bad in ("Traceback", "unexpected", "MemoryError", "UnicodeEncodeError", "\x1b"):
        assert bad not in out + err, (bad, err)
    (out + err).encode("utf-8")  # no lone surrogate: printable on a UTF-8 terminal


def write_folder(folder: Path, files_: dict[str, str | bytes]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in files_.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return folder


# --- the bounded reader itself -------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", HOSTILE)
def test_the_bounded_reader_refuses_non_regular_files_at_once(tmp_path: Path, kind: str) -> None:
    path = hostile(kind, tmp_path, "x.bin")
    with never_opened(path), pytest.raises(FileReadError, match="not a regular file") as caught:
        read_bounded(path, 1024)
    assert str(path) in str(caught.value)
    assert caught.value.code == "not_regular"
    with pytest.raises(FileReadError, match="a directory"):
        read_bounded(tmp_path, 1024)


def test_the_bounded_reader_never_reads_past_the_limit(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "grows.json"
    path.write_bytes(b"x" * 5000)
    assert read_bounded(path, 5000) == b"x" * 5000
    with pytest.raises(FileReadError, match=r"grows\.json: file is 5,000 bytes; the limit is 4,999 bytes"):
        read_bounded(path, 4999, what="file")
    # a file that grows after its size was checked (stat says 0 bytes): still cut at limit + 1 bytes
    real_check = files.check_regular

    def stale_size(p):
        st = real_check(p)
        return os.stat_result((st.st_mode, *st[1:6], 0, *st[7:10]))

    monkeypatch.setattr(files, "check_regular", stale_size)
    reads: list[int] = []
    real_fdopen = os.fdopen

    def counting_fdopen(fd, mode):
        handle = real_fdopen(fd, mode)
        real_read = handle.read

        class Counting:
            def read(self, n):
                data = real_read(n)
                reads.append(len(data))
                return data

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                handle.close()

        return Counting()

    monkeypatch.setattr(files.os, "fdopen", counting_fdopen)
    with pytest.raises(FileReadError, match="the limit is 100 bytes"):
        read_bounded(path, 100)
    assert sum(reads) == 101


def test_a_symlink_loop_and_a_missing_file_are_clear(tmp_path: Path) -> None:
    loop = tmp_path / "loop.json"
    loop.symlink_to(loop)
    with pytest.raises(FileReadError, match=r"loop\.json: cannot read the file: symlink loop"):
        read_bounded(loop, 10)
    with pytest.raises(FileReadError, match=r"nope\.json: cannot read the file: no such file"):
        read_bounded(tmp_path / "nope.json", 10)


# --- datasets ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", HOSTILE)
def test_hostile_dataset_file_is_a_clear_error_and_writes_nothing(engine, capsys, tmp_path: Path, kind: str) -> None:
    path = hostile(kind, tmp_path, "hostile.json")
    before = table_counts(engine)
    with never_opened(path):
        with pytest.raises(DatasetError, match="not a regular file"):
            load_dataset(path, knowledge_base="kb")
        rc, out, err = cli(capsys, "evaluate", "--dataset", str(path), "--knowledge-base", "kb")
    assert_clear_user_error(rc, out, err, str(path), "not a regular file")
    assert table_counts(engine) == before


def test_a_dataset_over_50_mb_is_refused_by_size(tmp_path: Path) -> None:
    path = tmp_path / "huge.json"
    with path.open("wb") as f:  # sparse: 51 MB without writing them
        f.truncate(51 * 1024 * 1024)
    with pytest.raises(DatasetError, match=r"huge\.json: file is 51\.0 MB; the limit is 50 MB"):
        load_dataset(path, knowledge_base="kb")


BAD_DATASET_STEMS = {
    "pipe": "x|y",
    "newline": "line\nbreak",
    "esc": "\x1b[2Jclear",
    "long": "d" * 250,
    "non_utf8": os.fsdecode(b"caf\xe9"),
    "space": "has space",
}


@pytest.mark.parametrize("stem", BAD_DATASET_STEMS.values(), ids=BAD_DATASET_STEMS.keys())
def test_bad_dataset_file_names_are_clear_errors_through_the_cli(engine, capsys, tmp_path: Path, stem: str) -> None:
    path = tmp_path / f"{stem}.json"
    path.write_text(json.dumps({"knowledge_base": "kb", "cases": [GOOD_CASE]}), encoding="utf-8")
    before = table_counts(engine)
    with pytest.raises(DatasetError, match="not a valid dataset name"):
        load_dataset(path)
    rc, out, err = cli(capsys, "evaluate", "--dataset", str(path))
    assert_clear_user_error(rc, out, err, "not a valid dataset name", "invalid dataset name")
    assert table_counts(engine) == before
    rc, out, err = cli(capsys, "runs")
    assert "\x1b" not in out + err


@pytest.mark.parametrize("name", ["../../etc/x", "x|y", "a\nb", "\x1b]0;title\x07", "n" * 250])
def test_bad_dataset_names_given_in_the_file_or_by_the_caller(name: str) -> None:
    raw = json.dumps({"name": name, "knowledge_base": "kb", "cases": [GOOD_CASE]})
    with pytest.raises(DatasetError, match="is not a valid dataset name|the limit is 200") as caught:
        parse_dataset(raw)
    assert "\x1b" not in str(caught.value) and "\x07" not in str(caught.value)
    with pytest.raises(DatasetError, match="is not a valid dataset name"):
        parse_dataset(json.dumps({"knowledge_base": "kb", "cases": [GOOD_CASE]}), name=name)


def test_cjk_and_shard_dataset_names_are_accepted(tmp_path: Path) -> None:
    for stem in ("评测集-第一版", "scifact@0001", "データ.v2"):
        path = tmp_path / f"{stem}.json"
        path.write_text(json.dumps({"knowledge_base": "知识库", "cases": [GOOD_CASE]}, ensure_ascii=False),
                        encoding="utf-8")
        assert load_dataset(path).name == stem


# --- strategy files and versions -----------------------------------------------------------------------------

@pytest.mark.parametrize("kind", HOSTILE)
def test_hostile_strategies_file_is_a_clear_error(engine, capsys, monkeypatch, tmp_path: Path, kind: str) -> None:
    path = hostile(kind, tmp_path, "strategies.yaml")
    with never_opened(path), pytest.raises(StrategyError, match="not a regular file") as caught:
        load_registry(path)
    assert str(path) in str(caught.value)
    dataset = tmp_path / "ok.json"
    dataset.write_text(json.dumps({"knowledge_base": "kb", "cases": [GOOD_CASE]}), encoding="utf-8")
    before = table_counts(engine)
    monkeypatch.setenv("RAG_STRATEGIES_FILE", str(path))
    with never_opened(path):
        rc, out, err = cli(capsys, "evaluate", "--dataset", str(dataset))
    assert_clear_user_error(rc, out, err, str(path), "strategies file", "not a regular file")
    assert table_counts(engine) == before


def test_a_strategies_file_over_1_mb_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("strategies:\n" + "# padding\n" * 120_000, encoding="utf-8")
    with pytest.raises(StrategyError, match=r"big\.yaml: the file is 1\.1 MB; the limit is 1 MB"):
        load_registry(path)


@pytest.mark.parametrize("version", ["x|y", "../../etc/x", "a\nb", "\x1b[2J", "v" * 101, ".hidden", "has space",
                                     os.fsdecode(b"v\xff")])
def test_bad_strategy_versions_are_refused(version: str) -> None:
    with pytest.raises(StrategyError, match="field 'version'.*is not a valid strategy version") as caught:
        Strategy(version=version)
    assert str(caught.value).isprintable() or "\x1b" not in str(caught.value)


def test_cjk_strategy_versions_are_accepted_and_shipped_hashes_unchanged() -> None:
    assert Strategy(version="混合检索-v1").version == "混合检索-v1"
    registry = load_registry(PACKAGED_STRATEGIES_FILE)
    assert {v: s.params_hash() for v, s in registry.items()} == SHIPPED_HASHES


# --- documents -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", HOSTILE)
def test_hostile_document_is_a_clear_error_and_ingestion_never_starts(engine, capsys, tmp_path: Path,
                                                                      kind: str) -> None:
    folder = write_folder(tmp_path / "docs", {"good.md": "Backups are tested every quarter."})
    target = hostile("symlink_to_dev_zero" if kind == "dev_zero" else kind, folder, "hostile.md")
    kb = f"hostile-docs-{kind}-{TAG}"
    before = kb_counts(engine)
    with never_opened(target):
        with pytest.raises(SourceError, match="not a regular file"):
            read_folder(folder)
        rc, out, err = cli(capsys, "ingest", str(folder), "--knowledge-base", kb)
    assert_clear_user_error(rc, out, err, str(target), "not a regular file")
    assert kb_counts(engine) == before
    rc, out, err = cli(capsys, "ingest", "/dev/zero", "--knowledge-base", kb)
    assert_clear_user_error(rc, out, err, "/dev/zero", "not a folder")
    assert kb_counts(engine) == before


def test_a_20_mb_jsonl_text_is_refused_naming_file_line_and_limit(engine, capsys, tmp_path: Path) -> None:
    folder = tmp_path / "big"
    folder.mkdir()
    with (folder / "corpus.jsonl").open("w", encoding="utf-8") as f:
        f.write(json.dumps({"id": "small", "text": "fine"}) + "\n")
        f.write(json.dumps({"id": "huge", "text": "word " * (4 * 1024 * 1024)}) + "\n")
    before = kb_counts(engine)
    with pytest.raises(SourceError, match=r"corpus\.jsonl:2: .*'huge'.* is 20\.0 MB; the limit is 10 MB"):
        read_folder(folder)
    rc, out, err = cli(capsys, "ingest", str(folder), "--knowledge-base", f"big-jsonl-{TAG}")
    assert_clear_user_error(rc, out, err, "corpus.jsonl:2", "the limit is 10 MB", "RAG_MAX_DOCUMENT_BYTES")
    assert kb_counts(engine) == before


def test_the_document_limit_is_a_setting(tmp_path: Path, monkeypatch) -> None:
    folder = write_folder(tmp_path / "docs", {"a.md": "x" * 2000, "b.jsonl": json.dumps({"id": 1, "text": "y" * 1500})})
    assert len(read_folder(folder)) == 2
    monkeypatch.setenv("RAG_MAX_DOCUMENT_BYTES", "1000")
    with pytest.raises(SourceError, match=r"a\.md: the document is 2,000 bytes; the limit is 1,000 bytes"):
        read_folder(folder)
    (folder / "a.md").unlink()
    with pytest.raises(SourceError, match=r"b\.jsonl:1: .* the limit is 1,000 bytes"):
        read_folder(folder)


def test_junk_documents_are_skipped_with_warnings_and_not_searchable(engine, capsys, tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "junk", {
        "good.md": "Nightly backups are restored every quarter on a scratch server.",
        "controls.md": "Before\x00NUL \x1b[2Jescape\x07 and\x7f del; tab\tkept.\n",
        "unclosed.html": "<html><body><p>Visible start <b unclosed tag then text that must be kept",
        "nul.md": b"\x00" * 5000,
        "empty.txt": b"",
        "blank.md": "   \n\t\r\n  ",
        "lines.jsonl": json.dumps({"id": "ok", "text": "jsonl line text"}) + "\n"
                       + json.dumps({"id": "blank", "text": "\u0000\u0001 "}) + "\n",
    })
    (folder / "loop.md").symlink_to(folder / "loop.md")
    (folder / "dangling.txt").symlink_to(folder / "nowhere.txt")
    kb = f"垃圾文档-{TAG}"  # a CJK knowledge base name is accepted
    rc, out, err = cli(capsys, "ingest", str(folder), "--knowledge-base", kb, "--chunk-size", "0")
    assert rc == 0, err
    result = json.loads(out)
    for name in ("nul.md", "empty.txt", "blank.md", "loop.md", "dangling.txt", "lines.jsonl#blank"):
        assert any(name in w for w in result["warnings"]), (name, result["warnings"])
        assert f"skipped {name}" in err
    assert any("symlink loop" in w for w in result["warnings"])
    stats = kb_service.knowledge_base_stats(engine, kb)
    assert stats.documents == stats.searchable_documents == 4  # good, controls, unclosed, lines.jsonl#ok
    assert stats.current_chunks == 4
    with engine.connect() as conn:
        chunks = dict(conn.execute(sa.text(
            "SELECT d.original_name, c.content FROM document_chunks c JOIN documents d ON d.id = c.document_id "
            "JOIN knowledge_bases k ON k.id = c.knowledge_base_id WHERE k.name = :kb AND c.is_current"),
            {"kb": kb}).all())
    assert set(chunks) == {"good.md", "controls.md", "unclosed.html", "lines.jsonl#ok"}
    assert chunks["controls.md"] == "BeforeNUL [2Jescape and del; tab\tkept."
    assert "must be kept" in chunks["unclosed.html"] and "Visible start" in chunks["unclosed.html"]
    assert not any(ch in text for text in chunks.values() for ch in "\x00\x1b\x07\x7f")


def test_an_unreadable_document_is_listed_as_skipped(tmp_path: Path, monkeypatch) -> None:
    folder = write_folder(tmp_path / "docs", {"good.md": "text", "secret.md": "no access"})
    real_open = os.open

    def refuse(path, flags, *args):
        if str(path).endswith("secret.md"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *args)

    monkeypatch.setattr(files.os, "open", refuse)
    docs = read_folder(folder)
    assert [d.original_name for d in docs] == ["good.md"]
    assert [str(s) for s in docs.skipped] == ["skipped secret.md: cannot read the file: Permission denied"]


# --- knowledge base names ------------------------------------------------------------------------------------

BAD_KB_NAMES = {"pipe": "x|y", "traversal": "../../etc/x", "newline": "a\nb", "esc": "\x1b[2Jkb", "long": "k" * 250,
                "non_utf8": os.fsdecode(b"kb\xff"), "dot": ".hidden", "empty": ""}


@pytest.mark.parametrize("name", BAD_KB_NAMES.values(), ids=BAD_KB_NAMES.keys())
def test_bad_knowledge_base_names_are_clear_errors_and_write_nothing(engine, capsys, tmp_path: Path,
                                                                     name: str) -> None:
    folder = write_folder(tmp_path / "docs", {"good.md": "Backups are tested every quarter."})
    before = kb_counts(engine)
    rc, out, err = cli(capsys, "ingest", str(folder), "--knowledge-base", name)
    assert_clear_user_error(rc, out, err, "invalid knowledge base name")
    assert kb_counts(engine) == before


# --- terminal output -----------------------------------------------------------------------------------------

def test_tables_escape_control_characters_in_names() -> None:
    summary = {"strategy_version": "v\x1b[2J", "dataset": {"name": "legacy\x1b]0;x\x07"}, "status": "succeeded",
               "is_current": True, "case_count": 1, "run_id": "r1"}
    table = comparison_table([{**summary, "recall_at_k": 0.5, "mrr": None, "ndcg_at_k": 1.0}],
                             metrics=("recall_at_k", "mrr", "ndcg_at_k"))
    assert "\x1b" not in table and "\x07" not in table
    assert "v\\x1b[2J" in table and "legacy\\x1b]0;x\\x07" in table


def test_check_dataset_report_escapes_case_ids() -> None:
    from rag_pipeline.cli.check_dataset import format_report
    from rag_pipeline.evaluation.datasets.label_check import LabelReport, LabelStatus

    row = LabelStatus(case_id="c\x1b[2J", chunk_id="id\x07", status="not_a_uuid", detail="bad \x1b[31m")
    report = LabelReport(knowledge_base="kb", rows=[row], verdicts={"c\x1b[2J": "all_invalid"})
    text = format_report(report)
    assert "\x1b" not in text and "\x07" not in text and "c\\x1b[2J" in text


def test_runs_output_never_contains_a_raw_escape(engine, capsys) -> None:
    rc, out, err = cli(capsys, "runs")
    assert rc == 0, err
    assert "\x1b" not in out + err
