"""The chunk catalogue of an external system on the real database: `kb catalogue` loads a BEIR corpus.jsonl or
id/text JSON Lines as an external knowledge base's catalogue; the label check, `chunks`, `show --include-text` of an
imported TREC run and `suggest` read it; a bad line is named by file, line and field and nothing is stored; project
and attached knowledge bases are refused."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml

from rag_pipeline.cli.main import main
from rag_pipeline.contracts.attached import AttachedMapping
from rag_pipeline.contracts.labelling import DraftQuestion
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.evaluation.datasets.resolve import load_dataset_file
from rag_pipeline.evaluation.datasets.strict_json import DatasetError
from rag_pipeline.evaluation.evaluate import evaluate_dataset
from rag_pipeline.knowledge_base import catalogue
from rag_pipeline.knowledge_base.lifecycle import KnowledgeBaseError, ensure_knowledge_base
from rag_pipeline.knowledge_base.queries import attached as attached_queries
from rag_pipeline.retrieval.registry_file import write_strategy
from rag_pipeline.retrieval.strategies import Strategy, StrategyError, get_strategy, strategy_from_mapping
from rag_pipeline.retrieval.trace import RetrievalError
from rag_pipeline.service import trec
from rag_pipeline.service.labelling import drafts
from rag_pipeline.storage.ids import external_chunk_uuid
from rag_pipeline_tests.retrieval.retriever_server import RetrieverServer

ROOT = Path(__file__).resolve().parents[2]

CANONICAL = "30465673-88ea-41f0-a5a0-da496592f3df"
BEIR = [{"_id": "doc-a", "title": "Alpha", "text": "The aardvark eats ants at night."},
        {"_id": 17, "title": "", "text": "Seventeen\ttabs and \\ backslashes\nand lines."},
        {"_id": CANONICAL, "title": "Gamma", "text": "A canonical id is its own chunk id."},
        {"_id": "doc-c", "text": "Pangolins eat ants too.", "metadata": {"x": 1}}]


def _write(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def _json_out(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def _chunk(kb: str, raw: str) -> str:
    return str(external_chunk_uuid(kb, raw)[0])


def _catalogue_rows(engine, kb: str) -> dict[str, tuple[str, str | None, str | None]]:
    with engine.connect() as conn:
        return {r.chunk_id: (r.external_id, r.title, r.content) for r in conn.execute(sa.text(
            "SELECT x.chunk_id::text AS chunk_id, x.external_id, x.title, x.content FROM external_chunk_ids x "
            "JOIN knowledge_bases k ON k.id = x.knowledge_base_id WHERE k.name = :kb"), {"kb": kb})}


def _counts(engine) -> tuple[int, int, int]:
    with engine.connect() as conn:
        return tuple(conn.execute(sa.text(  # type: ignore[return-value]
            "SELECT (SELECT count(*) FROM knowledge_bases), (SELECT count(*) FROM external_chunk_ids), "
            "(SELECT count(*) FROM external_chunk_ids WHERE content IS NOT NULL)")).one())


def test_a_beir_corpus_is_the_catalogue_the_label_check_chunks_and_show_read(engine, kb_name, tmp_path,
                                                                               capsys) -> None:
    corpus = _write(tmp_path / "corpus.jsonl", BEIR)
    assert main(["kb", "catalogue", kb_name, "--corpus", str(corpus)]) == 0
    out = _json_out(capsys)
    assert (out["created"], out["format"], out["documents"], out["catalogued"], out["dropped"], out["kind"]) == (
        True, "beir", 4, 4, 0, "external")
    rows = _catalogue_rows(engine, kb_name)
    assert rows == {_chunk(kb_name, "doc-a"): ("doc-a", "Alpha", BEIR[0]["text"]),
                    _chunk(kb_name, "17"): ("17", None, BEIR[1]["text"]),
                    CANONICAL: (CANONICAL, "Gamma", BEIR[2]["text"]),
                    _chunk(kb_name, "doc-c"): ("doc-c", None, BEIR[3]["text"])}
    assert main(["kb", kb_name]) == 0
    shown = _json_out(capsys)
    assert (shown["kind"], shown["catalogued_chunks"], shown["current_chunks"]) == ("external", 4, 0)

    # the label check: a catalogued id is ok, any other unknown_id naming the knowledge base and its catalogue
    labels = [_chunk(kb_name, "doc-a"), CANONICAL, _chunk(kb_name, "doc-z")]
    dataset = tmp_path / "ext-set.json"
    dataset.write_text(json.dumps({"name": "ext-set", "knowledge_base": kb_name, "cases": [
        {"case_id": "c1", "question": "What do aardvarks eat?", "k": 2, "relevant_chunk_ids": labels[:2]},
        {"case_id": "c2", "question": "Who eats ants as well?", "k": 2, "relevant_chunk_ids": labels[2:]}]}),
        encoding="utf-8")
    assert main(["check-dataset", "--dataset", str(dataset), "--format", "json"]) == 1
    checked = {r["chunk_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert [checked[c]["status"] for c in labels] == ["ok", "ok", "unknown_id"]
    assert checked[labels[0]]["detail"] == "catalogued document 'doc-a'"
    assert f"not in the chunk catalogue of external knowledge base {kb_name!r}" in checked[labels[2]]["detail"]
    assert "4 catalogued chunk(s)" in checked[labels[2]]["detail"]

    # chunks lists the catalogue in original-id order and searches its titles and texts
    assert main(["chunks", "--knowledge-base", kb_name, "--format", "json"]) == 0
    listed = _json_out(capsys)
    assert listed["total"] == 4
    assert [c["document_name"] for c in listed["chunks"]] == ["17", CANONICAL, "doc-a", "doc-c"]
    assert listed["chunks"][2]["text"] == "Alpha\n\n" + BEIR[0]["text"]
    assert main(["chunks", "--knowledge-base", kb_name, "--search", "ANTS", "--format", "json"]) == 0
    found = _json_out(capsys)
    assert (found["total"], [c["chunk_id"] for c in found["chunks"]]) == (
        2, [_chunk(kb_name, "doc-a"), _chunk(kb_name, "doc-c")])
    assert main(["chunks", "--knowledge-base", kb_name, "--document", "doc-a"]) == 2
    assert "searched without --document" in capsys.readouterr().err

    # an imported TREC run of the external system: show --include-text gives the catalogue's text
    run_file = tmp_path / "ext.run"
    run_file.write_text("c1 Q0 doc-a 1 2.0 t\nc1 Q0 doc-z 2 1.0 t\nc2 Q0 17 1 1.5 t\n", encoding="utf-8")
    result = trec.import_run(engine, run_file, strategy="ext-retriever", dataset=str(dataset))
    assert main(["show", result.run_id, "--format", "json", "--candidates", "all", "--include-text"]) == 0
    report = _json_out(capsys)
    texts = {c["document_name"]: c["content"] for case in report["cases"] for c in case["candidates"]}
    assert texts == {"doc-a": "Alpha\n\n" + BEIR[0]["text"], "doc-z": None, "17": BEIR[1]["text"]}

    # suggest drafts from the run show the catalogue text
    draft = drafts.pool_runs(engine, [result.run_id])
    by_id = {c.chunk_id: c for q in draft.questions for c in q.candidates}
    assert by_id[_chunk(kb_name, "17")].text == BEIR[1]["text"]
    assert by_id[_chunk(kb_name, "doc-a")].document_name == "doc-a"

    # built-in strategies cannot run on it, nothing is ingested into it
    with pytest.raises(RetrievalError, match="is external"):
        evaluate_dataset(engine, load_dataset(dataset), get_strategy("hybrid-v1"))
    assert main(["evaluate", "--dataset", str(dataset), "--strategy", "hybrid-v1"]) == 2
    assert "only an http strategy (your retriever) or a TREC run file import" in capsys.readouterr().err
    with engine.begin() as conn, pytest.raises(KnowledgeBaseError, match="nothing is ingested into it"):
        ensure_knowledge_base(conn, kb_name, "simple", 0, 0)

    # re-running replaces the catalogue: id/text JSON Lines this time, detected
    again = _write(tmp_path / "docs.jsonl", [{"id": "doc-a", "text": "Aardvarks, revised."},
                                             {"id": "doc-new", "text": "New.", "title": "N"}])
    assert main(["kb", "catalogue", kb_name, "--corpus", str(again)]) == 0
    out = _json_out(capsys)
    assert (out["created"], out["format"], out["documents"], out["catalogued"], out["dropped"]) == (
        False, "jsonl", 2, 2, 3)
    rows = _catalogue_rows(engine, kb_name)
    assert rows[_chunk(kb_name, "doc-a")] == ("doc-a", None, "Aardvarks, revised.")
    assert rows[_chunk(kb_name, "doc-new")] == ("doc-new", "N", "New.")
    assert rows[_chunk(kb_name, "17")] == ("17", None, None), "dropped from the catalogue, its id still remembered"
    assert CANONICAL not in rows
    exported = tmp_path / "back.run"
    trec.export_run(engine, result.run_id, exported)
    assert sorted(line.split()[2] for line in exported.read_text(encoding="utf-8").splitlines()) == [
        "17", "doc-a", "doc-z"]


def test_suggest_on_an_external_knowledge_base_shows_the_catalogue(engine, kb_name, tmp_path) -> None:
    corpus = _write(tmp_path / "corpus.jsonl", BEIR)
    catalogue.catalogue(engine, kb_name, corpus, "beir")
    asked = [DraftQuestion(case_id="q1", question="ants?", candidates=[
        drafts._candidate(None, _chunk(kb_name, "doc-c"), {}, 1)])]
    assert drafts.questions_k(engine, kb_name, _write(tmp_path / "q.txt", ["ants?"]), None) == (1, 4)
    with pytest.raises(StrategyError, match="is external"):
        drafts.pool(engine, kb_name, asked, strategies=["hybrid-v1"])


def test_a_scifact_corpus_is_catalogued_in_seconds(engine, kb_name, bench_data) -> None:
    corpus = bench_data / "scifact" / "corpus.jsonl"
    t0 = time.perf_counter()
    result = catalogue.catalogue(engine, kb_name, corpus)
    elapsed = time.perf_counter() - t0
    lines = sum(1 for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip())
    assert (result.format, result.documents, result.catalogued) == ("beir", lines, lines)
    assert elapsed < 10, f"{lines} documents took {elapsed:.2f} s"
    print(f"scifact catalogue: {lines} documents in {elapsed:.3f} s")


GOOD = '{"_id": "a", "title": "A", "text": "x"}'


@pytest.mark.parametrize(("lines", "line", "problem"), [
    ([GOOD, "{not json"], 2, "invalid JSON"),
    ([GOOD, '["a list"]'], 2, "must be a JSON object"),
    ([GOOD, '{"text": "no id"}'], 2, "field '_id' is missing"),
    ([GOOD, '{"_id": 1.5, "text": "x"}'], 2, "'_id' must be a string or an integer"),
    ([GOOD, '{"_id": true, "text": "x"}'], 2, "'_id' must be a string or an integer"),
    ([GOOD, '{"_id": "", "text": "x"}'], 2, "'_id' is empty"),
    ([GOOD, '{"_id": "b", "text": 3}'], 2, "'text' must be a string"),
    ([GOOD, '{"_id": "b"}'], 2, "'text' must be a string"),
    ([GOOD, '{"_id": "b", "text": "x", "title": 4}'], 2, "'title' must be a string or null"),
    ([GOOD, '{"_id": "b", "text": "nul \\u0000"}'], 2, "'text' contains a NUL character"),
    ([GOOD, "", '{"_id": "b", "text": "y"}', '{"_id": "a", "text": "again"}'], 4,
     "field '_id': id 'a' is given twice (first on line 1)"),
    (['{"title": "neither id"}'], 1, "field '_id' (BEIR corpus.jsonl) or 'id' (id/text JSON Lines) is missing"),
])
def test_a_bad_line_is_named_and_nothing_is_stored(engine, kb_name, tmp_path, capsys, lines, line,
                                                   problem) -> None:
    good = _write(tmp_path / "good.jsonl", [{"_id": "keep", "text": "kept"}])
    assert main(["kb", "catalogue", kb_name, "--corpus", str(good)]) == 0
    capsys.readouterr()
    bad = _write(tmp_path / "bad.jsonl", lines)
    before, kept = _counts(engine), _catalogue_rows(engine, kb_name)
    for name in (kb_name, f"{kb_name}-new"):
        assert main(["kb", "catalogue", name, "--corpus", str(bad)]) == 2
        err = capsys.readouterr().err
        assert f"{bad}:{line}: " in err and problem in err and "nothing was stored" in err, err
        assert "Traceback" not in err
    assert _counts(engine) == before and _catalogue_rows(engine, kb_name) == kept


def test_a_forced_format_needs_its_id_field(engine, kb_name, tmp_path, capsys) -> None:
    corpus = _write(tmp_path / "c.jsonl", [{"id": "a", "text": "x"}])
    assert main(["kb", "catalogue", kb_name, "--corpus", str(corpus), "--format", "beir"]) == 2
    assert f"{corpus}:1: field '_id' is missing (format beir)" in capsys.readouterr().err
    assert main(["kb", "catalogue", kb_name, "--corpus", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl" in capsys.readouterr().err
    _write(corpus, ["", "  "])
    assert main(["kb", "catalogue", kb_name, "--corpus", str(corpus)]) == 2
    assert "no document" in capsys.readouterr().err


def test_project_and_attached_knowledge_bases_are_refused(engine, demo_kb, kb_name, tmp_path, capsys) -> None:
    corpus = _write(tmp_path / "corpus.jsonl", BEIR)
    before = _counts(engine)
    assert main(["kb", "catalogue", demo_kb, "--corpus", str(corpus)]) == 2
    err = capsys.readouterr().err
    assert f"knowledge base {demo_kb!r} was ingested into this project" in err and "chunks)" in err
    with engine.begin() as conn:
        attached_queries.record_attached(conn, uuid.uuid4(), kb_name, AttachedMapping(), "SOME_URL_VAR", 0)
    assert main(["kb", "catalogue", kb_name, "--corpus", str(corpus)]) == 2
    assert f"knowledge base {kb_name!r} is attached" in capsys.readouterr().err
    assert _counts(engine)[1:] == before[1:]


# The HTTP retriever's texts (texts_path, titles_path), against the real local retriever server.
TEMPLATE = '{"question": "{question}", "case_id": "{case_id}", "k": "{pool_size}"}'
MAIN_HASH = "a4631f8fa7175b44c22d07889ee61190af13a2f1abdc5d101ff7d6bc83abed23"
"""The identity hash main's code gave the strategy of :func:`_http` without text paths."""
STRANGER = {"doc-a": "Aardvarks eat ants at night.", "doc-b": "Pangolins eat ants by day.",
            "doc-c": "Cats sleep all day.", "doc-d": "Ants eat leaves."}


def _http(url: str, version: str = "http-hash-v1", **http) -> Strategy:
    return strategy_from_mapping({"version": version, "http": {
        "url": url, "ids_path": "hits[*].id", "scores_path": "hits[*].score", "request_template": TEMPLATE,
        "vector_ranks_path": "hits[*].vector_rank", "retries": 0, **http}})


def test_the_text_paths_are_no_part_of_the_identity(tmp_path, capsys) -> None:
    plain = _http("http://127.0.0.1:9/search")
    texts = _http("http://127.0.0.1:9/search", texts_path="hits[*].text", titles_path="hits[*].title")
    assert plain.params_hash() == texts.params_hash() == MAIN_HASH
    assert "texts_path" not in json.dumps(texts.params())
    with pytest.raises(StrategyError, match="titles_path': give texts_path too"):
        _http("http://127.0.0.1:9/search", titles_path="hits[*].title")
    registry = tmp_path / "s.yaml"
    args = ["strategy", "add-http", "http-hash-v1", "--registry", str(registry), "--url", "http://127.0.0.1:9/search",
            "--ids-path", "hits[*].id", "--scores-path", "hits[*].score", "--request-template", TEMPLATE,
            "--vector-ranks-path", "hits[*].vector_rank", "--retries", "0"]
    assert main([*args, "--texts-path", "hits[*].text"]) == 0
    assert f"identity {MAIN_HASH[:12]}" in capsys.readouterr().out
    assert strategy_from_mapping(
        next(s for s in yaml.safe_load(registry.read_text(encoding="utf-8"))["strategies"]
             if s["version"] == "http-hash-v1")).http.texts_path == "hits[*].text"  # type: ignore[union-attr]
    assert main([*args, "--texts-path", "hits[*].text"]) == 0  # the same: unchanged
    assert main([*args, "--texts-path", "texts"]) == 2  # the same ranking, other texts: said, not silently kept
    assert "edit that entry of the file" in capsys.readouterr().err


def _errors(engine, run_id: str) -> dict[str, str]:
    with engine.connect() as conn:
        return dict(conn.execute(sa.text(  # type: ignore[arg-type]
            "SELECT case_id, retrieval_error FROM retrieval_evaluation_case_results WHERE evaluation_run_id = :r "
            "AND retrieval_error IS NOT NULL"), {"r": run_id}).all())


def test_an_http_run_catalogues_the_returned_texts(engine, kb_name, tmp_path) -> None:
    catalogue.catalogue(engine, kb_name, _write(tmp_path / "c.jsonl", [{"id": "doc-c", "text": "old"}]))
    dataset = tmp_path / "http-ext.json"
    cases = [{"case_id": f"c{i}", "question": q, "k": 2, "relevant_chunk_ids": [_chunk(kb_name, "doc-a")]}
             for i, q in enumerate(["Who eats ants?", "What do aardvarks eat at night?", "ants", "cats sleep"])]
    dataset.write_text(json.dumps({"name": "http-ext", "knowledge_base": kb_name, "cases": cases}), encoding="utf-8")
    assert main(["check-dataset", "--dataset", str(dataset)]) == 1  # doc-a is not catalogued yet
    plan = {"c2": ["text-not-string"], "c1": ["texts-short"]}
    with RetrieverServer(STRANGER, plan) as server:
        titled = evaluate_dataset(engine, load_dataset(dataset), _http(
            server.url, "http-texts-v1", texts_path="hits[*].text", titles_path="hits[*].title"))
        short = evaluate_dataset(engine, load_dataset(dataset), _http(server.url, "http-short-v1", texts_path="texts"))
    assert _errors(engine, titled.run_id) == {"c2": "hits[*].text[0]: expected a string, got int"}
    assert _errors(engine, short.run_id) == {"c1": "texts: 2 values for 3 ids"}
    rows = _catalogue_rows(engine, kb_name)
    assert {raw: text for raw, _, text in rows.values()} == STRANGER  # doc-c's old text replaced by the reply's
    assert {title for raw, title, _ in rows.values()} <= {None, *(f"T {raw}" for raw in STRANGER)}
    assert any(title for _, title, _ in rows.values())
    assert main(["check-dataset", "--dataset", str(dataset)]) == 0  # doc-a is catalogued now


def test_suggest_pools_an_http_retriever_on_an_external_knowledge_base_with_its_texts(engine, kb_name, tmp_path,
                                                                                     monkeypatch) -> None:
    catalogue.catalogue(engine, kb_name, _write(tmp_path / "c.jsonl", [{"id": "doc-c", "text": "old"}]))
    registry = tmp_path / "strategies.yaml"
    with RetrieverServer(STRANGER) as server:
        write_strategy(registry, _http(server.url, "http-suggest-texts-v1", texts_path="hits[*].text"))
        monkeypatch.setenv("RAG_STRATEGIES_FILE", str(registry))
        draft = drafts.pool(engine, kb_name, [DraftQuestion(case_id="q1", question="Who eats ants?",
                                                            candidates=[])], depth=5)
    assert draft.strategies == ["http-suggest-texts-v1"]  # the built-in ones cannot run here
    assert "hybrid-v1" in draft.strategies_left_out
    got = {c.document_name: c.text for c in draft.questions[0].candidates}
    assert got == {raw: STRANGER[raw] for raw in ("doc-a", "doc-b", "doc-d")}


def test_an_http_run_on_a_project_knowledge_base_catalogues_only_what_is_not_its_chunk(engine, demo_kb,
                                                                                       tmp_path) -> None:
    with engine.connect() as conn:
        own = {str(r[0]): r[1] for r in conn.execute(sa.text(
            "SELECT c.id, c.content FROM document_chunks c JOIN knowledge_bases k ON k.id = c.knowledge_base_id "
            "WHERE k.name = :kb AND c.is_current ORDER BY c.id LIMIT 5"), {"kb": demo_kb})}
    ext = f"ext-{uuid.uuid4().hex[:8]}"
    words = "zyzzyva quokka"
    served = {**{cid: f"{words} {text}" for cid, text in own.items()}, ext: f"{words} an outside document"}
    dataset = tmp_path / "http-demo-texts.json"
    dataset.write_text(json.dumps({"name": "http-demo-texts", "knowledge_base": demo_kb, "cases": [
        {"case_id": "z1", "question": words, "k": 3, "relevant_chunk_ids": [next(iter(own))]}]}), encoding="utf-8")
    with RetrieverServer(served) as server:
        evaluate_dataset(engine, load_dataset(dataset), _http(server.url, "http-demo-texts-v1", texts_path="texts"))
    with engine.connect() as conn:
        stored = dict(conn.execute(sa.text(
            "SELECT external_id, content FROM external_chunk_ids x JOIN knowledge_bases k ON k.id = "
            "x.knowledge_base_id WHERE k.name = :kb AND content IS NOT NULL"), {"kb": demo_kb}).all())
    assert stored.get(ext) == served[ext]
    assert not set(stored) & set(own), "the knowledge base's own chunks keep their own text"


def test_a_dataset_file_labels_the_external_systems_own_ids(engine, kb_name, demo_kb, tmp_path, capsys) -> None:
    catalogue.catalogue(engine, kb_name, _write(tmp_path / "corpus.jsonl", BEIR))
    cases = [{"case_id": "c1", "question": "What do aardvarks eat?", "k": 2, "relevant_chunk_ids": ["doc-a", "17"]},
             {"case_id": "c2", "question": "Who else eats ants?", "k": 2,
              "relevant_chunk_ids": {"doc-c": 2, "doc-z": 1, CANONICAL: 0}}]
    dataset = tmp_path / "own-ids.json"
    dataset.write_text(json.dumps({"name": "own-ids", "knowledge_base": kb_name, "cases": cases}), encoding="utf-8")
    assert main(["check-dataset", "--dataset", str(dataset), "--format", "json"]) == 1
    checked = {r["chunk_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert {c: r["status"] for c, r in checked.items()} == {
        _chunk(kb_name, "doc-a"): "ok", _chunk(kb_name, "17"): "ok", _chunk(kb_name, "doc-c"): "ok",
        _chunk(kb_name, "doc-z"): "unknown_id"}
    assert "(id 'doc-z')" in checked[_chunk(kb_name, "doc-z")]["detail"]
    assert _catalogue_rows(engine, kb_name)[_chunk(kb_name, "doc-z")] == ("doc-z", None, None)  # remembered

    # the same labels as qrels: the same dataset version; a run of the ids scores on them
    qrels, topics = tmp_path / "own.qrels", tmp_path / "own.topics.jsonl"
    qrels.write_text("c1 0 doc-a 1\nc1 0 17 1\nc2 0 doc-c 2\nc2 0 doc-z 1\nc2 0 " + CANONICAL + " 0\n",
                     encoding="utf-8")
    topics.write_text("".join(json.dumps({"qid": c["case_id"], "question": c["question"], "k": 2}) + "\n"
                              for c in cases), encoding="utf-8")
    _, dataset_id, _ = trec.import_dataset(engine, qrels, topics, name="own-ids", knowledge_base=kb_name)
    with engine.connect() as conn:
        stored = conn.execute(sa.text("SELECT content_hash FROM retrieval_evaluation_datasets WHERE id = :id"),
                              {"id": dataset_id}).scalar()
    assert stored == load_dataset_file(engine, dataset).content_hash
    run_file = tmp_path / "own.run"
    run_file.write_text("c1 Q0 doc-a 1 2.0 t\nc1 Q0 17 2 1.0 t\nc2 Q0 doc-c 1 1.0 t\n", encoding="utf-8")
    result = trec.import_run(engine, run_file, strategy="own-ids-retriever", dataset=str(dataset))
    assert result.metrics["recall_at_k"] == pytest.approx((1.0 + 0.5) / 2)

    # on a knowledge base of the project's own such an id is refused as before
    dataset.write_text(json.dumps({"name": "own-ids", "knowledge_base": demo_kb, "cases": cases}), encoding="utf-8")
    before = _counts(engine)
    assert main(["check-dataset", "--dataset", str(dataset), "--format", "json"]) == 1
    rows = json.loads(capsys.readouterr().out)
    assert {r["status"] for r in rows if r["chunk_id"] != CANONICAL} == {"not_a_uuid"}
    with pytest.raises(DatasetError, match='"doc-a" is not a UUID'):
        load_dataset_file(engine, dataset)
    assert _counts(engine) == before
