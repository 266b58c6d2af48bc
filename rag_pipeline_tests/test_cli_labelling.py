"""Labelling without SQL: ``chunks``, ``db url --libpq``, ``suggest`` (pooled judging), ``label`` in a
pseudo-terminal, and bad input. Real database, real USE embeddings, jieba for the Chinese text."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest
import sqlalchemy as sa

from rag_pipeline.cli import main

# ingestion + USE load of the module fixture, evaluations, a pty
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
KB = "labelling-cli"
DOCS = {
    "monorepo.md": "Why one repository. Keeping every service in one repository allows atomic commits across "
                   "services. A single version of each third-party library is used everywhere. Builds are cached "
                   "remotely so a change only rebuilds what it touches. Code owners review the folders they own.",
    "backup.md": "Backups. Nightly backups use basebackup with continuous archiving of the write-ahead log. "
                 "Restores are tested every quarter on a scratch server. A restore drill takes about two hours. "
                 "The backup bucket keeps thirty days of history.",
    "leave-zh.md": "休假制度。正式员工每年享有二十五天带薪年假。未休完的年假最多可以结转五天到下一年。"
                   "结转的假期须在次年三月三十一日前休完。病假需要提供医院证明。婚假为十天。",
    "coffee.md": "The office coffee machine is descaled every Friday. Oat milk is in the left fridge. "
                 "Cups go into the dishwasher, not the sink.",
}


def chunk_rows(engine, kb: str, current: bool = True) -> list:
    with engine.connect() as conn:
        return conn.execute(sa.text(
            "SELECT c.id::text AS id, d.original_name, c.ordinal, c.char_start, c.char_end, c.content "
            "FROM document_chunks c JOIN documents d ON d.id = c.document_id "
            "JOIN knowledge_bases k ON k.id = c.knowledge_base_id WHERE k.name = :kb AND c.is_current = :cur "
            "ORDER BY d.original_name, c.ordinal"), {"kb": kb, "cur": current}).all()


def containing(rows, phrase: str) -> list[str]:
    return [r.id for r in rows if phrase in r.content]


@pytest.fixture(scope="module")
def kb(engine, tmp_path_factory) -> list:
    folder = tmp_path_factory.mktemp("labelling_docs")
    for name, text in DOCS.items():
        (folder / name).write_text(text + "\n", encoding="utf-8")
    assert main(["ingest", str(folder), "--knowledge-base", KB, "--text-search", "chinese", "--chunk-size", "120",
                 "--chunk-overlap", "0"]) == 0
    rows = chunk_rows(engine, KB)
    assert len(rows) > len(DOCS), "documents are cut into several chunks"
    return rows


def run_json(capsys, *argv: str):
    code = main(list(argv))
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def test_chunks_search_finds_a_known_chunk_by_an_english_and_a_chinese_phrase(kb, capsys):
    for phrase in ("atomic commits", "结转五天"):
        [expected] = containing(kb, phrase)
        found = run_json(capsys, "chunks", "--knowledge-base", KB, "--search", phrase, "--format", "json")
        first = found["chunks"][0]
        assert first["chunk_id"] == expected and "phrase" in first["matched"], found["chunks"][:2]
        assert phrase in first["snippet"] and phrase in first["text"]
    # words that are not one literal phrase: the keyword leg (jieba) and the vector leg still find the chunk
    [expected] = containing(kb, "结转五天")
    found = run_json(capsys, "chunks", "--knowledge-base", KB, "--search", "年假 结转 下一年", "--format", "json")
    assert found["chunks"][0]["chunk_id"] == expected
    assert {"keyword", "vector"} <= set(found["chunks"][0]["matched"]) and "phrase" not in found["chunks"][0]["matched"]


def test_chunks_json_is_stable_and_lists_every_searchable_chunk_in_order(kb, capsys):
    args = ("chunks", "--knowledge-base", KB, "--format", "json", "--limit", "1000")
    first, second = run_json(capsys, *args), run_json(capsys, *args)
    assert first == second
    assert first["total"] == len(kb) == len(first["chunks"])
    assert [c["chunk_id"] for c in first["chunks"]] == [r.id for r in kb]
    assert list(first["chunks"][0]) == ["rank", "chunk_id", "document_id", "document_name", "ordinal", "char_start",
                                        "char_end", "matched", "score", "snippet", "text"]
    row = kb[0]
    assert (first["chunks"][0]["char_start"], first["chunks"][0]["char_end"]) == (row.char_start, row.char_end)
    searched = ("chunks", "--knowledge-base", KB, "--search", "backup restore", "--format", "json")
    assert run_json(capsys, *searched) == run_json(capsys, *searched)
    one_doc = run_json(capsys, "chunks", "--knowledge-base", KB, "--document", "backup.md", "--format", "json")
    assert {c["document_name"] for c in one_doc["chunks"]} == {"backup.md"}
    assert one_doc["total"] == sum(r.original_name == "backup.md" for r in kb)
    # the table shows full chunk ids, the span and the snippet
    assert main(["chunks", "--knowledge-base", KB, "--search", "atomic commits", "--limit", "2"]) == 0
    out = capsys.readouterr().out
    assert containing(kb, "atomic commits")[0] in out and "monorepo.md #" in out


def test_chunks_bad_input_is_one_clear_line(kb, capsys):
    assert main(["chunks", "--knowledge-base", "no-such-kb"]) == 2
    assert "unknown knowledge base 'no-such-kb'" in capsys.readouterr().err
    assert main(["chunks", "--knowledge-base", KB, "--document", "backups.md"]) == 2
    err = capsys.readouterr().err
    assert "no document 'backups.md' in knowledge base" in err and "did you mean 'backup.md'" in err
    with pytest.raises(SystemExit):
        main(["chunks", "--knowledge-base", KB, "--limit", "0"])


def test_db_url_libpq_is_accepted_by_psql(kb, capsys):
    assert main(["db", "url", "--libpq"]) == 0
    uri = capsys.readouterr().out.strip()
    assert uri.startswith("postgresql://") and "+psycopg" not in uri
    psql = subprocess.run(["psql", uri, "-At", "-c", "SELECT count(*) FROM document_chunks c JOIN knowledge_bases k "
                           f"ON k.id = c.knowledge_base_id WHERE k.name = '{KB}' AND c.is_current"],
                          capture_output=True, text=True, timeout=60)
    assert psql.returncode == 0, psql.stderr
    assert int(psql.stdout.strip()) == len(kb)


QUESTIONS = ["Why keep all services in one repository?", "年假可以结转几天？", "How often are restores tested?"]


def write_questions(path: Path) -> Path:
    path.write_text("# questions for the labelling test\n" + "\n\n".join(QUESTIONS) + "\n", encoding="utf-8")
    return path


def test_suggest_pools_are_the_union_of_each_strategys_top_depth(kb, tmp_path, capsys):
    strategies, depth = ["keyword-v1", "vector-v1", "bm25-v1"], 4
    draft_path = tmp_path / "pool.draft.json"
    assert main(["suggest", "--knowledge-base", KB, "--questions", str(write_questions(tmp_path / "q.txt")),
                 *[a for s in strategies for a in ("--strategy", s)], "--depth", str(depth),
                 "--output", str(draft_path)]) == 0
    capsys.readouterr()
    draft = json.loads(draft_path.read_text(encoding="utf-8"))
    assert draft["format"] == "rag-pipeline-label-draft" and draft["strategies"] == strategies
    assert [q["question"] for q in draft["questions"]] == QUESTIONS
    texts = {r.id: r.content for r in kb}
    # a dataset of the same questions, each labelled with its first pooled candidate, evaluated per strategy
    cases = [{"case_id": q["case_id"], "question": q["question"], "k": depth,
              "relevant_chunk_ids": [q["candidates"][0]["chunk_id"]]} for q in draft["questions"]]
    dataset = tmp_path / "pool-check.json"
    dataset.write_text(json.dumps({"knowledge_base": KB, "cases": cases}), encoding="utf-8")
    expected: dict[str, dict[str, dict[str, int]]] = {q["case_id"]: {} for q in draft["questions"]}
    for strategy in strategies:
        report = tmp_path / f"report-{strategy}.json"
        assert main(["evaluate", "--dataset", str(dataset), "--strategy", strategy, "--quiet",
                     "--output", str(report)]) == 0
        for case in json.loads(report.read_text(encoding="utf-8"))["cases"]:
            for cand in case["candidates"]:
                if cand["rank"] <= depth:
                    expected[case["case_id"]].setdefault(cand["chunk_id"], {})[strategy] = cand["rank"]
    capsys.readouterr()
    for q in draft["questions"]:
        pooled = {c["chunk_id"]: c["found_by"] for c in q["candidates"]}
        assert pooled == expected[q["case_id"]], q["case_id"]
        for c in q["candidates"]:
            assert c["text"] == texts[c["chunk_id"]] and c["document_name"] and c["grade"] is None


def spawn_label(*args: str) -> pexpect.spawn:
    return pexpect.spawn(str(Path(sys.executable).parent / "rag-pipeline"), ["label", *args], cwd=str(ROOT),
                         env=dict(os.environ), encoding="utf-8", timeout=120, dimensions=(40, 120))


def press(child: pexpect.spawn, *keys: str) -> None:
    for key in keys:
        child.send(key)
        child.expect(["0-3 grade", "last question", "first question"])


def test_label_in_a_pseudo_terminal_resumes_and_exports_a_dataset_that_passes_check_dataset(kb, tmp_path, capsys):
    draft_path = tmp_path / "mine.draft.json"
    assert main(["suggest", "--knowledge-base", KB, "--questions", str(write_questions(tmp_path / "q.txt")),
                 "--strategy", "bm25-v1", "--strategy", "vector-v1", "--depth", "3", "--output", str(draft_path)]) == 0
    capsys.readouterr()
    pools = [[c["chunk_id"] for c in q["candidates"]] for q in json.loads(draft_path.read_text())["questions"]]
    # session 1: grade the first candidate 2, the second 0, next question; then quit
    child = spawn_label(str(draft_path))
    child.expect("0-3 grade")
    press(child, "2", "0", "n")
    child.send("q")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    saved = json.loads(draft_path.read_text())
    assert saved["position"] == 1 and saved["questions"][0]["status"] == "judged"
    # session 2 resumes on question 2: relevant (space) on the first candidate, next; skip question 3; export
    dataset = tmp_path / "mine.json"
    child = spawn_label(str(draft_path), "--output", str(dataset))
    child.expect(r"\[2/3\]")
    child.expect("0-3 grade")
    press(child, " ", "n", "s")
    child.send("q")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    data = json.loads(dataset.read_text(encoding="utf-8"))
    assert data["knowledge_base"] == KB
    assert [c["case_id"] for c in data["cases"]] == ["q-001", "q-002"]
    assert data["cases"][0]["relevant_chunk_ids"] == {pools[0][0]: 2, pools[0][1]: 0}
    assert data["cases"][1]["relevant_chunk_ids"] == [pools[1][0]]
    assert data["metadata"]["labelled_with"]["left_out"] == [{"case_id": "q-003", "reason": "skipped"}]
    assert main(["check-dataset", "--dataset", str(dataset)]) == 0
    assert capsys.readouterr().out.startswith("OK: all 2 labels of 2 cases are valid")


def test_bad_input_gives_clear_errors_and_writes_nothing(kb, tmp_path, capsys):
    questions = write_questions(tmp_path / "q.txt")
    out = tmp_path / "d.draft.json"
    assert main(["suggest", "--knowledge-base", "nope", "--questions", str(questions), "--output", str(out)]) == 2
    assert "unknown knowledge base 'nope'" in capsys.readouterr().err and not out.exists()
    empty = tmp_path / "empty.txt"
    empty.write_text("\n# only a comment\n\n", encoding="utf-8")
    assert main(["suggest", "--knowledge-base", KB, "--questions", str(empty), "--output", str(out)]) == 2
    assert "has no question" in capsys.readouterr().err and not out.exists()
    assert main(["suggest", "--knowledge-base", KB, "--questions", str(questions), "--strategy", "bm25-v1",
                 "--depth", "2", "--output", str(out)]) == 0
    capsys.readouterr()
    good = out.read_text(encoding="utf-8")
    dataset = tmp_path / "x.json"
    out.write_text(good[: len(good) // 2], encoding="utf-8")  # edited into invalid JSON
    assert main(["label", str(out), "--export", str(dataset)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rag-pipeline: error: invalid draft {out}") and "line" in err and not dataset.exists()
    broken = json.loads(good)
    broken["questions"][1]["candidates"][0]["grade"] = "high"
    out.write_text(json.dumps(broken), encoding="utf-8")
    assert main(["label", str(out), "--export", str(dataset)]) == 2
    assert "questions[1].candidates[0].grade" in capsys.readouterr().err and not dataset.exists()
    out.write_text(good, encoding="utf-8")  # valid, but nothing judged yet
    assert main(["label", str(out), "--export", str(dataset)]) == 2
    assert "nothing to export" in capsys.readouterr().err and not dataset.exists()


def test_suggest_says_its_k_and_where_the_dataset_goes_and_never_overwrites_grades(kb, tmp_path, datasets, capsys):
    out = tmp_path / "mine.draft.json"
    args = ["suggest", "--knowledge-base", KB, "--questions", str(write_questions(tmp_path / "q.txt")),
            "--strategy", "bm25-v1", "--depth", "2", "--output", str(out)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    k = max(1, min(10, len(kb) // 5))  # a fifth of the searchable chunks, not 10 on a tiny knowledge base
    assert f"k of the cases: {k} (a fifth of the knowledge base's {len(kb)} searchable chunks" in printed
    assert {q["k"] for q in json.loads(out.read_text())["questions"]} == {k}
    assert f"--output {datasets / 'mine.json'}" in printed  # the folder the sensor watches, not ./datasets/
    draft = json.loads(out.read_text())
    draft["questions"][0]["candidates"][0]["grade"] = 2
    out.write_text(json.dumps(draft), encoding="utf-8")
    graded = out.read_text()
    assert main(args) == 2  # the grades are kept
    assert "holding 1 grades" in capsys.readouterr().err and out.read_text() == graded
    # label --export: a dataset that is not an export of this draft is kept; an earlier export is replaced
    other = tmp_path / "other.json"
    other.write_text('{"knowledge_base": "x", "cases": []}', encoding="utf-8")
    assert main(["label", str(out), "--export", str(other)]) == 2
    assert "is not an export of this draft" in capsys.readouterr().err and other.read_text().endswith("[]}")
    mine = tmp_path / "mine.json"
    assert main(["label", str(out), "--export", str(mine)]) == 0
    assert main(["label", str(out), "--export", str(mine)]) == 0
    assert main(["label", str(out), "--export", str(other), "--force"]) == 0
    assert json.loads(other.read_text())["knowledge_base"] == KB
    assert main([*args, "--force"]) == 0
    capsys.readouterr()
    assert all(c["grade"] is None for q in json.loads(out.read_text())["questions"] for c in q["candidates"])


def test_label_header_end_screen_and_unfinished_export_in_a_pseudo_terminal(kb, tmp_path, capsys):
    draft_path = tmp_path / "end.draft.json"
    assert main(["suggest", "--knowledge-base", KB, "--questions", str(write_questions(tmp_path / "q.txt")),
                 "--strategy", "bm25-v1", "--strategy", "vector-v1", "--depth", "3", "--output", str(draft_path)]) == 0
    capsys.readouterr()
    pools = [[c["chunk_id"] for c in q["candidates"]] for q in json.loads(draft_path.read_text())["questions"]]
    assert all(len(p) >= 2 for p in pools)
    dataset = tmp_path / "end.json"
    child = spawn_label(str(draft_path), "--output", str(dataset))
    child.expect("0-3 grade")
    child.send("1")
    child.expect(rf"case q-001 · pending \(1/{len(pools[0])} graded\)")
    press(child, *["0"] * (len(pools[0]) - 1))
    child.expect("case q-001 · judged")  # every candidate graded: judged without n
    press(child, "n", "n", "s")  # the last question skipped: the end screen
    child.expect(r"\[end\] all 3 questions seen")
    child.send("b")
    child.expect(r"\[3/3\] case q-003")  # back to the last question, not the one before it
    press(child, "2")
    child.send("q")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    assert f"exported, q-003: still pending: 1 of {len(pools[2])} candidates graded" in child.before
    data = json.loads(dataset.read_text(encoding="utf-8"))
    assert [c["case_id"] for c in data["cases"]] == ["q-001", "q-003"]
    assert data["cases"][1]["relevant_chunk_ids"] == {pools[2][0]: 2}
