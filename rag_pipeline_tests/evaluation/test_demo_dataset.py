"""The committed demo dataset is reproducible from demo/ and its chunk ids resolve after ingesting demo/kb."""

from __future__ import annotations

import json
from pathlib import Path

import sqlalchemy as sa
import yaml

from rag_pipeline.evaluation.datasets import demo as demo_dataset
from rag_pipeline.evaluation.datasets.demo import build_demo_dataset
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.knowledge_base import chunking
from rag_pipeline.knowledge_base.ingestion import ingest_documents
from rag_pipeline.knowledge_base.sources import read_folder
from rag_pipeline.knowledge_base.textsearch import text_mode_warning

ROOT = Path(__file__).resolve().parents[2]
KB_DIR, CASES, COMMITTED = ROOT / "demo" / "kb", ROOT / "demo" / "cases.yaml", ROOT / "datasets" / "demo.json"


def demo_chunks() -> dict[str, tuple[str, chunking.Chunk]]:
    """chunk id → (document name, chunk) under the demo settings."""
    out = {}
    for doc in read_folder(KB_DIR):
        for c in chunking.chunk_text(doc.text, demo_dataset.DEMO_CHUNK_SIZE, demo_dataset.DEMO_CHUNK_OVERLAP):
            out[str(chunking.chunk_id(demo_dataset.DEMO_KB, doc.original_name, c))] = (doc.original_name, c)
    return out


def test_committed_dataset_is_up_to_date() -> None:
    built = build_demo_dataset(KB_DIR, CASES)
    committed = json.loads(COMMITTED.read_text(encoding="utf-8"))
    assert built == committed, (
        "datasets/demo.json is stale: regenerate it with "
        "`python -c 'from pathlib import Path; from rag_pipeline.evaluation.datasets.demo import write_demo_dataset; "
        "write_demo_dataset(Path.cwd())'` from the repo root and commit the result"
    )


def test_demo_dataset_shape_and_labels() -> None:
    data = json.loads(COMMITTED.read_text(encoding="utf-8"))
    spec = yaml.safe_load(CASES.read_text(encoding="utf-8"))
    assert data["knowledge_base"] == demo_dataset.DEMO_KB == spec["knowledge_base"]
    cases = data["cases"]
    assert len(cases) >= 30
    assert len({c["case_id"] for c in cases}) == len(cases)
    assert sum(len(c["relevant_chunk_ids"]) > 1 for c in cases) >= 3, "some cases have several relevant chunks"
    assert any(any("\u4e00" <= ch <= "\u9fff" for ch in c["question"]) for c in cases), "Chinese questions"
    assert any(c["question"].isascii() for c in cases), "English questions"
    chunks = demo_chunks()
    docs = {d.original_name: d for d in read_folder(KB_DIR)}
    by_case = {c["case_id"]: c for c in spec["cases"]}
    for case in cases:
        ids = case["relevant_chunk_ids"]
        if case.get("answerable") is False:
            assert ids == [] and "relevant" not in by_case[case["case_id"]], "an unanswerable case has none"
            continue
        assert ids, f"{case['case_id']} has no relevant chunk"
        assert len(set(ids)) == len(ids)
        assert case["k"] >= 1
        # the ids are the deterministic ids of demo chunks, and each quoted passage is inside one of them
        assert set(ids) <= set(chunks), f"{case['case_id']}: ids are not chunk ids of KB 'demo'"
        for ref in by_case[case["case_id"]]["relevant"]:
            text = docs[ref["doc"]].text
            start = text.find(ref["quote"])
            assert start >= 0, f"{case['case_id']}: quote not in {ref['doc']}"
            end = start + len(ref["quote"])
            labelled = [chunks[i][1] for i in ids if chunks[i][0] == ref["doc"]]
            assert any(c.char_start < end and start < c.char_end for c in labelled), (
                f"{case['case_id']}: no relevant chunk covers {ref['quote']!r}")
            containing = [i for i, (name, c) in chunks.items()
                          if name == ref["doc"] and c.char_start <= start and end <= c.char_end]
            assert set(containing) <= set(ids), f"{case['case_id']}: a chunk containing the quote is not labelled"


def _cjk(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


def test_demo_answer_fields() -> None:
    """Every answerable case has 1-3 reference answers, a Chinese question a Chinese one; at least 2 English and 2
    Chinese unanswerable cases, whose ``absent`` terms occur nowhere in demo/kb (their answer is not there)."""
    data = json.loads(COMMITTED.read_text(encoding="utf-8"))
    spec = {c["case_id"]: c for c in yaml.safe_load(CASES.read_text(encoding="utf-8"))["cases"]}
    answerable = [c for c in data["cases"] if c.get("answerable", True)]
    unanswerable = [c for c in data["cases"] if not c.get("answerable", True)]
    for case in answerable:
        refs = case.get("reference_answers") or []
        assert 1 <= len(refs) <= 3, case["case_id"]
        assert not _cjk(case["question"]) or any(_cjk(r) for r in refs), f"{case['case_id']}: a Chinese answer"
    assert sum(bool(c.get("key_points")) for c in answerable) >= 15
    assert sum(_cjk(c["question"]) for c in unanswerable) >= 2 and sum(
        c["question"].isascii() for c in unanswerable) >= 2
    text = " ".join(d.text for d in read_folder(KB_DIR)).lower()
    for case in unanswerable:
        assert "reference_answers" not in case and "absent" not in case, "the test's terms are not dataset fields"
        terms = spec[case["case_id"]]["absent"]
        assert terms and not [t for t in terms if t.lower() in text], case["case_id"]
    assert sum(not c.answerable for c in load_dataset(COMMITTED).cases) == len(unanswerable)


def test_the_demo_is_ingested_in_the_text_mode_the_project_recommends_for_it() -> None:
    texts = [d.text for d in read_folder(KB_DIR)]
    assert text_mode_warning(demo_dataset.DEMO_KB, demo_dataset.DEMO_TEXT_SEARCH, texts) is None
    assert "--text-search mixed" in text_mode_warning(demo_dataset.DEMO_KB, "chinese", texts)  # what it said


def test_ids_resolve_after_ingesting_the_demo_kb(engine) -> None:
    # Ingestion is idempotent: if another test already ingested "demo" with the demo settings, nothing changes.
    ingest_documents(engine, read_folder(KB_DIR), demo_dataset.DEMO_KB, text_search=demo_dataset.DEMO_TEXT_SEARCH,
                     chunk_size=demo_dataset.DEMO_CHUNK_SIZE, chunk_overlap=demo_dataset.DEMO_CHUNK_OVERLAP)
    data = json.loads(COMMITTED.read_text(encoding="utf-8"))
    wanted = {i for c in data["cases"] for i in c["relevant_chunk_ids"]}
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT c.id::text AS id, c.is_current, d.is_deleted, d.publication_status::text AS pub, "
            "(SELECT count(*) FROM chunk_embeddings e WHERE e.chunk_id = c.id) AS n_emb "
            "FROM document_chunks c JOIN documents d ON d.id = c.document_id "
            "JOIN knowledge_bases k ON k.id = c.knowledge_base_id WHERE k.name = :n AND c.id::text = ANY(:ids)"),
            {"n": demo_dataset.DEMO_KB, "ids": sorted(wanted)}).all()
        n_current = conn.execute(sa.text(
            "SELECT count(*) FROM document_chunks c JOIN knowledge_bases k ON k.id = c.knowledge_base_id "
            "WHERE k.name = :n AND c.is_current"), {"n": demo_dataset.DEMO_KB}).scalar()
    found = {r.id: r for r in rows}
    assert set(found) == wanted, f"unresolved ids: {sorted(wanted - set(found))[:5]}"
    assert all(r.is_current and not r.is_deleted and r.n_emb >= 1 for r in rows)
    assert n_current == len(demo_chunks())


def test_make_run_keeps_a_demo_built_in_another_text_mode_and_says_how_to_recreate_it(engine, demo_kb, monkeypatch,
                                                                                       capsys) -> None:
    from rag_pipeline.defs import demo as demo_job

    assert demo_job.demo_text_search() == demo_dataset.DEMO_TEXT_SEARCH and not capsys.readouterr().err
    monkeypatch.setattr(demo_job, "DEMO_TEXT_SEARCH", "chinese")  # as if this demo KB came from another version
    assert demo_job.demo_text_search() == demo_dataset.DEMO_TEXT_SEARCH  # kept: a mode never changes in place
    assert "`make clean-db` (it removes the whole local database) then `make run`" in capsys.readouterr().err
