"""Mixed Chinese/English text search: the ``mixed`` text mode and heading-joining chunking, before vs after.

For each corpus — the demo (``demo/kb``, ``demo/cases.yaml``: 50 cases, English and Chinese) and the bilingual
bench corpus (``bench/mixed_corpus``: 5 English + 5 Chinese Markdown documents, 20 labelled cases) — and each
chunk size (500, the demo's, and 150, where heading-only chunks appear), four knowledge bases are ingested in
the same run and database:

- ``before``: text mode ``chinese`` (jieba on the whole text, then Postgres ``simple``) and the chunking without
  the heading rule (the rule switched off in this process: ``chunking._join_next`` returns its chunk unchanged);
- ``+mode``: text mode ``mixed`` only; ``+headings``: the heading rule only; ``after``: both.

Every strategy of the registry whose models are all USE (ingested with that model only) is run over every
answerable case at the cases' ``k``; nDCG@k, Recall@k and MRR come from the project's metrics
(:func:`rag_pipeline.evaluation.metrics.evaluate_many`). ``xlang`` is the mean number of chunks, per question,
in a keyword strategy's whole pool (every chunk it matched, up to its candidate k) in the other language than the
question (a Chinese chunk for an English question, or the reverse): the noise English stop words matching in
``chinese`` mode cause. ``heading-only`` counts chunks holding only
Markdown headings. Prints a markdown report (``--markdown PATH`` also writes it, ``--json PATH`` the figures).

Usage: python bench/mixed_language.py [--sizes 500,150] [--corpora demo,mixed]
(database: ``RAG_DATABASE_URL``, else the embedded server, as every command.)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

import numpy as np
import sqlalchemy as sa
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from benchutil import machine_line  # noqa: E402

from rag_pipeline.evaluation.datasets.demo import build_demo_dataset  # noqa: E402
from rag_pipeline.evaluation.metrics import evaluate_many  # noqa: E402
from rag_pipeline.knowledge_base import chunking, textsearch  # noqa: E402
from rag_pipeline.knowledge_base.ingestion import ingest_documents  # noqa: E402
from rag_pipeline.knowledge_base.sources import read_folder  # noqa: E402
from rag_pipeline.retrieval.search import hybrid_search_batch  # noqa: E402
from rag_pipeline.retrieval.strategies import load_registry  # noqa: E402
from rag_pipeline.storage.engine import get_engine  # noqa: E402

MODEL = "use-multilingual-v3"
CORPORA = {"demo": (ROOT / "demo" / "kb", ROOT / "demo" / "cases.yaml"),
           "mixed": (ROOT / "bench" / "mixed_corpus" / "kb", ROOT / "bench" / "mixed_corpus" / "cases.yaml")}
CONFIGS = (("before", "chinese", False), ("+mode", "mixed", False), ("+headings", "chinese", True),
           ("after", "mixed", True))
OVERLAP = {500: 80, 150: 20}
_HEADINGS_ONLY = re.compile(r"\s*(?:#{1,6}[ \t][^\n]*\s*)+")
_JOIN_NEXT = chunking._join_next


def _no_heading_rule(_text, _units, _i, j, _size):  # the chunking before the heading rule
    return j


def _language(text: str) -> str:
    return "zh" if textsearch.cjk_share([text])[0] > textsearch.CJK_MOSTLY else "en"


def _run_config(engine, corpus: str, size: int, config: tuple[str, str, bool], strategies) -> dict:
    label, mode, headings = config
    kb = f"mixbench-{corpus}-{size}-{mode}-{'join' if headings else 'plain'}"
    kb_dir, cases_file = CORPORA[corpus]
    chunking._join_next = _JOIN_NEXT if headings else _no_heading_rule
    try:
        spec = yaml.safe_load(cases_file.read_text(encoding="utf-8")) | {"knowledge_base": kb}
        with tempfile.TemporaryDirectory() as tmp:
            spec_file = Path(tmp) / "cases.yaml"
            spec_file.write_text(yaml.safe_dump(spec, allow_unicode=True), encoding="utf-8")
            dataset = build_demo_dataset(kb_dir, spec_file, chunk_size=size, chunk_overlap=OVERLAP[size])
        ingest_documents(engine, read_folder(kb_dir), kb, text_search=mode, chunk_size=size,
                         chunk_overlap=OVERLAP[size], models=(MODEL,))
    finally:
        chunking._join_next = _JOIN_NEXT
    cases = [c for c in dataset["cases"] if c["relevant_chunk_ids"]]
    questions = [c["question"] for c in cases]
    relevant = [dict.fromkeys(c["relevant_chunk_ids"], 1) for c in cases]
    k = [int(c["k"]) for c in cases]
    kb_id = chunking.knowledge_base_id(kb)
    with engine.connect() as conn:
        contents = dict(conn.execute(sa.text(
            "SELECT id::text, content FROM document_chunks WHERE knowledge_base_id = :kb AND is_current"),
            {"kb": kb_id}).all())
    lang = {cid: _language(text) for cid, text in contents.items()}
    q_lang = [_language(q) for q in questions]
    out = {"chunks": len(contents), "heading_only": sum(bool(_HEADINGS_ONLY.fullmatch(t)) for t in contents.values()),
           "cases": len(cases), "k": sorted(set(k)), "strategies": {}}
    for s in strategies:
        with engine.connect() as conn:
            traces = hybrid_search_batch(conn, knowledge_base_id=kb_id, strategy=s, queries=questions)
        retrieved = [[c.chunk_id for c in tr.candidates] for tr in traces]
        m = evaluate_many(retrieved, relevant, k)
        other = sum(lang[c] != ql for r, ql in zip(retrieved, q_lang, strict=True) for c in r)
        out["strategies"][s.version] = {"ndcg": float(np.mean(m["ndcg_at_k"])),
                                        "recall": float(np.mean(m["recall_at_k"])),
                                        "mrr": float(np.mean(m["reciprocal_rank"])),
                                        "xlang": other / len(cases)}
    print(f"{corpus} size {size} {label}: {out['chunks']} chunks, {out['heading_only']} heading-only",
          file=sys.stderr)
    return out


def _table(corpus: str, size: int, runs: dict, strategies) -> list[str]:
    before, after = runs["before"], runs["after"]
    lines = [f"**{corpus}**, chunk size {size}: {before['cases']} answerable cases, k = {before['k']}; chunks "
             f"before/after {before['chunks']}/{after['chunks']}, heading-only chunks {before['heading_only']} → "
             f"{after['heading_only']}.", "",
             "| strategy | nDCG before | +mode | +headings | after | Δ nDCG | Recall before → after | "
             "MRR before → after | xlang before → after |", "|---|---:|---:|---:|---:|---:|---|---|---|"]
    for s in strategies:
        r = {label: runs[label]["strategies"][s.version] for label in runs}
        keyword = s.keyword_candidate_k and not s.vector_candidate_k
        xlang = f"{r['before']['xlang']:.2f} → {r['after']['xlang']:.2f}" if keyword else "—"
        lines.append(f"| {s.version} | {r['before']['ndcg']:.4f} | {r['+mode']['ndcg']:.4f} | "
                     f"{r['+headings']['ndcg']:.4f} | {r['after']['ndcg']:.4f} | "
                     f"{r['after']['ndcg'] - r['before']['ndcg']:+.4f} | "
                     f"{r['before']['recall']:.4f} → {r['after']['recall']:.4f} | "
                     f"{r['before']['mrr']:.4f} → {r['after']['mrr']:.4f} | {xlang} |")
    return lines + [""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="500,150", help="comma-separated chunk sizes (each 500 or 150)")
    ap.add_argument("--corpora", default="demo,mixed", help="comma-separated: demo, mixed")
    ap.add_argument("--markdown", type=Path, help="also write the report to this file")
    ap.add_argument("--json", type=Path, help="also write the figures, {corpus: {size: {config: ...}}}, as JSON")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    corpora = args.corpora.split(",")
    if bad := [s for s in sizes if s not in OVERLAP] + [c for c in corpora if c not in CORPORA]:
        ap.error(f"unknown size or corpus: {', '.join(map(str, bad))}")
    strategies = [s for s in load_registry().values()
                  if s.embedding_model == MODEL and s.rerank is None and s.text_search == "kb"]
    engine = get_engine()
    lines, figures = [machine_line(), ""], {}
    for corpus in corpora:
        for size in sizes:
            runs = {c[0]: _run_config(engine, corpus, size, c, strategies) for c in CONFIGS}
            figures.setdefault(corpus, {})[str(size)] = runs
            lines += _table(corpus, size, runs, strategies)
    report = "\n".join(lines)
    print(report)
    if args.markdown:
        args.markdown.write_text(report + "\n", encoding="utf-8")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
