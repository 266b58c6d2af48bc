"""A dataset survives a re-chunking: ``ingest --rechunk`` keeps the replaced chunks with their spans,
``fix-labels`` re-maps labels by document span when one current chunk covers >= 50 % of the old span, lists
the rest (never guessed), and records every change in the output and its metadata. Real database and models."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from rag_pipeline.cli import main

# three ingestions, five evaluations
pytestmark = pytest.mark.slow

KB, KB_SMALL = "relabel-same", "relabel-small"
DOCS = {  # each under 400 characters: one chunk per document at chunk size 400
    "monorepo.md": "Why one repository. Keeping every service in one repository allows atomic commits across "
                   "services. A single version of each third-party library is used everywhere. Builds are cached "
                   "remotely so a change only rebuilds what it touches.",
    "backup.md": "Backups. Nightly backups use basebackup with continuous archiving of the write-ahead log. "
                 "Restores are tested every quarter on a scratch server. A restore drill takes about two hours.",
    "coffee.md": "The office coffee machine is descaled every Friday. Oat milk is in the left fridge. "
                 "Cups go into the dishwasher, not the sink.",
    "travel.md": "Travel. Economy class is booked for flights under six hours. Hotels are booked through the "
                 "travel desk. Receipts are uploaded within thirty days of the trip.",
}
ANSWERS = {"atomic-001": ("Why keep every service in one repository for atomic commits?", "atomic commits"),
           "restore-001": ("How often are restores tested on a scratch server?", "tested every quarter"),
           "coffee-001": ("When is the coffee machine descaled?", "descaled every Friday")}


def rows(engine, kb: str, where: str = "c.is_current") -> dict[str, sa.Row]:
    with engine.connect() as conn:
        return {str(r.id): r for r in conn.execute(sa.text(
            "SELECT c.id, d.id AS doc_id, d.original_name, c.char_start, c.char_end, c.content, c.is_current "
            "FROM document_chunks c JOIN documents d ON d.id = c.document_id JOIN knowledge_bases k "
            f"ON k.id = c.knowledge_base_id WHERE k.name = :kb AND {where}"), {"kb": kb})}


def bm25_stats(engine, kb: str) -> tuple:
    """(chunk count, average chunk length, {lexeme: document frequency}) of a knowledge base."""
    with engine.connect() as conn:
        n, avgdl, kb_id = conn.execute(sa.text("SELECT chunk_count, round(avg_chunk_length::numeric, 9), id "
                                               "FROM knowledge_bases WHERE name = :kb"), {"kb": kb}).one()
        df = dict(conn.execute(sa.text("SELECT lexeme, doc_freq FROM knowledge_base_term_stats "
                                       "WHERE knowledge_base_id = :kb"), {"kb": kb_id}).all())
    return n, avgdl, df


def fresh_stats(engine, folder, chunking: list[str], capsys) -> tuple:
    assert main(["ingest", str(folder), "--knowledge-base", f"{KB}-fresh", *chunking]) == 0
    capsys.readouterr()
    return bm25_stats(engine, f"{KB}-fresh")


def evaluate(tmp_path, dataset, name: str) -> dict[str, float]:
    report = tmp_path / f"{name}.report.json"
    assert main(["evaluate", "--dataset", str(dataset), "--strategy", "bm25-v1", "--quiet",
                 "--output", str(report)]) == 0
    return {c["case_id"]: c["metrics"]["recall_at_k"] for c in json.loads(report.read_text())["cases"]}


def test_rechunking_keeps_old_rows_and_fix_labels_remaps_by_span(engine, tmp_path, capsys):
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, text in DOCS.items():
        (folder / name).write_text(text + "\n", encoding="utf-8")
    small = ["--chunk-size", "120", "--chunk-overlap", "0"]
    assert main(["ingest", str(folder), "--knowledge-base", KB, *small]) == 0
    before = rows(engine, KB)
    assert len(before) > len(DOCS)
    labels = {cid: next(i for i, r in before.items() if phrase in r.content) for cid, (_, phrase) in ANSWERS.items()}
    coffee_doc = str(next(r.doc_id for r in before.values() if r.original_name == "coffee.md"))
    cases = [{"case_id": cid, "question": q, "k": 1, "relevant_chunk_ids": [labels[cid]]}
             for cid, (q, _) in ANSWERS.items()]
    cases.append({"case_id": "doc-id-001", "question": "Where is the oat milk?", "k": 1,
                  "relevant_chunk_ids": [coffee_doc]})  # a document id, not a chunk id
    dataset = tmp_path / "relabel.json"
    dataset.write_text(json.dumps({"knowledge_base": KB, "cases": cases}), encoding="utf-8")
    recall_before = evaluate(tmp_path, dataset, "before")
    assert all(recall_before[c] == 1.0 for c in ANSWERS)

    # another chunk size on the same knowledge base: refused without --rechunk, then re-chunked in place
    big = ["--chunk-size", "400", "--chunk-overlap", "0"]
    assert main(["ingest", str(folder), "--knowledge-base", KB, *big]) == 2
    assert "--rechunk" in capsys.readouterr().err
    assert main(["ingest", str(folder), "--knowledge-base", KB, *big, "--rechunk"]) == 0
    assert json.loads(capsys.readouterr().out)["documents_rechunked"] == len(DOCS)
    after, old = rows(engine, KB), rows(engine, KB, "NOT c.is_current")
    assert len(after) == len(DOCS)
    for cid in before:  # every replaced chunk is kept with its span and text
        assert cid in old and (old[cid].char_start, old[cid].char_end, old[cid].content) == \
            (before[cid].char_start, before[cid].char_end, before[cid].content)
    assert bm25_stats(engine, KB) == fresh_stats(engine, folder, big, capsys)  # as if ingested at 400 from scratch
    assert main(["check-dataset", "--dataset", str(dataset)]) == 1
    assert "chunk_replaced" in capsys.readouterr().out

    fixed = tmp_path / "relabel-400.json"
    assert main(["fix-labels", "--dataset", str(dataset), "--knowledge-base", KB, "--output", str(fixed),
                 "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["counts"] == {"labels": 4, "ok": 0, "fixed": 4, "unresolved": 0}
    data = json.loads(fixed.read_text(encoding="utf-8"))
    record = data["metadata"]["label_fixes"]
    assert record["from"]["dataset"] == "relabel" and record["changes"] == result["changes"]
    by_case = {c["case_id"]: c for c in data["cases"]}
    for change in record["changes"]:
        [new] = change["new_chunk_ids"]
        assert by_case[change["case_id"]]["relevant_chunk_ids"] == [new]
        if change["case_id"] in ANSWERS:
            assert change["old_chunk_id"] == labels[change["case_id"]] and change["status"] == "chunk_replaced"
            assert change["overlap"] == {new: 1.0} and "covers 100%" in change["reason"]
            assert ANSWERS[change["case_id"]][1] in after[new].content
        else:
            assert change["old_chunk_id"] == coffee_doc and "exactly one chunk" in change["reason"]
            assert after[new].original_name == "coffee.md"
    assert main(["check-dataset", "--dataset", str(fixed)]) == 0
    capsys.readouterr()
    recall_after = evaluate(tmp_path, fixed, "after")
    assert {c: recall_after[c] for c in ANSWERS} == {c: recall_before[c] for c in ANSWERS}
    # a comparison on the re-mapped dataset says that its labels were re-mapped, and from what
    assert main(["evaluate", "--dataset", str(fixed), "--strategy", "keyword-v1", "--quiet"]) == 0
    capsys.readouterr()
    main(["compare", "--dataset", str(fixed), "--baseline", "bm25-v1", "--resamples", "100"])
    out = capsys.readouterr().out
    assert "labels re-mapped by fix-labels from dataset 'relabel'" in out and "4 fixed" in out, out

    # into a knowledge base with much smaller chunks: every old span is split, so nothing is guessed
    assert main(["ingest", str(folder), "--knowledge-base", KB_SMALL, "--chunk-size", "40",
                 "--chunk-overlap", "0"]) == 0
    capsys.readouterr()
    split = tmp_path / "relabel-40.json"
    assert main(["fix-labels", "--dataset", str(dataset), "--knowledge-base", KB_SMALL, "--output", str(split),
                 "--format", "json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["counts"]["unresolved"] >= 3
    small_rows = rows(engine, KB_SMALL)
    for item in result["unresolved"]:
        assert item["new_chunk_ids"] == [] and item["candidates"], item
        if item["status"] == "other_knowledge_base":
            assert all(c["overlap"] < 0.5 for c in item["candidates"]) and "split over" in item["reason"]
            assert 0.9 < sum(c["overlap"] for c in item["candidates"]) <= 1.0  # the pieces cover the span (but spaces)
            assert all(c["chunk_id"] in small_rows for c in item["candidates"])
        else:
            assert item["status"] == "is_document_id" and "coffee.md" in item["reason"]
    kept = json.loads(split.read_text(encoding="utf-8"))
    assert [c["relevant_chunk_ids"] for c in kept["cases"]] == [c["relevant_chunk_ids"] for c in cases]
    assert kept["metadata"]["label_fixes"]["unresolved"] == result["unresolved"]

    # bad input writes nothing
    nothing = tmp_path / "nothing.json"
    assert main(["fix-labels", "--dataset", str(dataset), "--knowledge-base", "nope", "--output", str(nothing)]) == 2
    assert "unknown knowledge base 'nope'" in capsys.readouterr().err and not nothing.exists()
    assert main(["fix-labels", "--dataset", str(dataset), "--knowledge-base", KB, "--output", str(dataset)]) == 2
    assert "is the dataset itself" in capsys.readouterr().err
