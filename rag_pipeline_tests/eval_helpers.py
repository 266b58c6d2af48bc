"""Shared setup of the evaluation tests: a tiny real knowledge base (real USE embeddings) and datasets."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa

from rag_pipeline.contracts.reports import MissReason
from rag_pipeline.contracts.runs import LabelIntegrity, MissReasonCounts
from rag_pipeline.evaluation.datasets import label_check
from rag_pipeline.evaluation.diagnosis import miss_reasons as diagnosis
from rag_pipeline.evaluation.diagnosis.diagnose import diagnose_batch, label_integrity, strategy_of_run
from rag_pipeline.evaluation.pools import PoolSet, fused_order
from rag_pipeline.evaluation.queries.knowledge_base import knowledge_base_row
from rag_pipeline.evaluation.runs import candidate_queries, case_queries
from rag_pipeline.evaluation.runs import queries as run_queries
from rag_pipeline.evaluation.runs.reports import write_report
from rag_pipeline.knowledge_base.ingestion import ingest_documents
from rag_pipeline.knowledge_base.sources import read_folder
from rag_pipeline.retrieval.search import hybrid_search_batch
from rag_pipeline.retrieval.strategies import Strategy
from rag_pipeline.retrieval.trace import RetrievalTrace

TINY_DOCS = {
    "backup.md": "Nightly backups use basebackup with continuous archiving of the write-ahead log. "
                 "Restores are tested every quarter on a scratch server.",
    "coffee.md": "The office coffee machine is descaled every Friday. Oat milk is in the left fridge.",
    "monorepo.md": "Keeping every service in one repository allows atomic commits across services "
                   "and a single version of each third-party library.",
    "onboarding.md": "New hires get a laptop on day one, meet their buddy, and ship a small change "
                     "in their first week.",
    "vacation-zh.md": "每位员工每年有十五天带薪年假，未休完的年假最多可以结转五天到下一年。",
}

EVAL_TABLES = ("retrieval_evaluation_datasets", "retrieval_evaluation_runs", "retrieval_evaluation_candidates",
               "retrieval_evaluation_case_results", "retrieval_strategies")


def ingest_tiny_kb(engine: sa.Engine, name: str, folder: Path) -> dict[str, str]:
    """Ingest :data:`TINY_DOCS` (one chunk each) into knowledge base ``name``; returns doc name → chunk id."""
    folder.mkdir(parents=True, exist_ok=True)
    for doc, text in TINY_DOCS.items():
        (folder / doc).write_text(text + "\n", encoding="utf-8")
    ingest_documents(engine, read_folder(folder), name, text_search="simple", chunk_size=500, chunk_overlap=80)
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT d.original_name, c.id FROM document_chunks c JOIN documents d ON d.id = c.document_id "
            "JOIN knowledge_bases kb ON kb.id = c.knowledge_base_id WHERE kb.name = :n AND c.is_current"
        ), {"n": name}).all()
    chunks = {r.original_name: str(r.id) for r in rows}
    assert set(chunks) == set(TINY_DOCS), "every tiny document is one chunk"
    return chunks


def tiny_cases(chunks: dict[str, str]) -> list[dict]:
    return [
        {"case_id": "backup-001", "question": "basebackup archiving", "k": 3,
         "relevant_chunk_ids": [chunks["backup.md"], chunks["coffee.md"]]},
        {"case_id": "monorepo-001", "question": "Why keep all services in one repository?", "k": 2,
         "relevant_chunk_ids": [chunks["monorepo.md"]]},
        {"case_id": "onboarding-001", "question": "What happens in the first week for a new hire?", "k": 3,
         "relevant_chunk_ids": [chunks["onboarding.md"]]},
        {"case_id": "vacation-zh-001", "question": "年假可以结转几天？", "k": 1,
         "relevant_chunk_ids": [chunks["vacation-zh.md"]]},
        {"case_id": "injection-001", "question": "'); DROP TABLE documents; -- & | ! ( ) : * <-> \x07 coffee",
         "k": 2, "relevant_chunk_ids": [chunks["coffee.md"]]},
    ]


def write_dataset(path: Path, knowledge_base: str | None, cases: list[dict], name: str | None = None) -> Path:
    """Write a dataset file; returns its path. A dataset is identified by its file name, so with ``name``
    the file is ``<path's folder>/<name>.json`` (and its ``name`` field says the same)."""
    data: object = cases
    if name:
        path = path.with_name(f"{name}.json")
    if knowledge_base is not None:
        data = {"knowledge_base": knowledge_base, "cases": cases}
        if name:
            data["name"] = name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2), encoding="utf-8")
    return path


def table_counts(engine: sa.Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {t: conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one() for t in EVAL_TABLES}


def run_rows(engine: sa.Engine, run_id) -> tuple[int, int]:
    """(candidate rows, case result rows) stored for one run."""
    with engine.connect() as conn:
        cands = conn.execute(sa.text("SELECT count(*) FROM retrieval_evaluation_candidates "
                                     "WHERE evaluation_run_id = :r"), {"r": run_id}).scalar_one()
        cases = conn.execute(sa.text("SELECT count(*) FROM retrieval_evaluation_case_results "
                                     "WHERE evaluation_run_id = :r"), {"r": run_id}).scalar_one()
    return cands, cases


def stored_pools(engine: sa.Engine, run_id) -> list:
    """Every stored candidate of a run (case, rank, chunk, each leg's score and rank, final score), in order."""
    with engine.connect() as conn:
        return conn.execute(sa.text(
            "SELECT case_index, rank, chunk_id::text, vector_score, vector_rank, keyword_score, keyword_rank, "
            "final_score FROM retrieval_evaluation_candidate_rows WHERE evaluation_run_id = :r "
            "ORDER BY case_index, rank"), {"r": run_id}).all()


def pool_subset(pools: PoolSet, cases) -> PoolSet:
    """The pools of the given case indices (ints or a boolean mask), same width."""
    index = np.asarray(cases)
    if index.dtype == bool:
        index = np.flatnonzero(index)
    picked = {f.name: getattr(pools, f.name)[index] for f in fields(pools)
              if f.name != "strategy_version" and getattr(pools, f.name) is not None}
    return PoolSet(**picked, strategy_version=pools.strategy_version)


def fused_ranks(pools: PoolSet, config: Any) -> np.ndarray:
    """1-based rank of every slot under ``config`` (0 in padding), comparable to ``stored_rank``."""
    ordered = fused_order(pools, config)
    ranks = np.empty_like(ordered)
    np.put_along_axis(ranks, ordered, np.arange(1, pools.pool_size + 1), axis=1)
    return np.where(pools.mask, ranks, 0)


def build_report(conn: sa.Connection, run_id, *, include_text: bool = False, candidates: str = "default",
                 case_id: str | None = None) -> dict:
    """The whole report of one run (id or unique id prefix) as the JSON :func:`write_report` writes, parsed."""
    buffer = io.StringIO()
    write_report(conn, run_id, buffer, include_text=include_text, candidates=candidates, case_id=case_id)
    return json.loads(buffer.getvalue())


@dataclass
class RunDiagnosis:
    run_id: str
    reasons: dict[str, list[MissReason]]  # case_id -> reasons, in case order
    labels: label_check.LabelReport
    summary: MissReasonCounts
    first_line: str | None

    @property
    def label_integrity(self) -> LabelIntegrity:
        return label_integrity(self.labels)


def diagnose_run(conn: sa.Connection, run_id, *, store: bool = True,
                 averages: Mapping[str, float] | None = None) -> RunDiagnosis:
    """Diagnose every case of a stored run in one separate pass, from its stored pools (what the evaluation loop's
    per-batch diagnosis must equal); ``store`` rewrites ``case_results.miss_reasons``. ``averages``: the run's."""
    run = run_queries.run_strategy(conn, run_id)
    kb = knowledge_base_row(conn, run.knowledge_base_id)
    stored = case_queries.case_rows(conn, run_id)
    pools: dict[str, list] = {c["case_id"]: [] for c in stored}
    for row in candidate_queries.pools_of_run(conn, run_id):
        pools.setdefault(row["case_id"], []).append(row)
    labels = label_check.check_labels(conn, kb, stored)
    reasons = diagnose_batch(conn, kb, strategy_of_run(run), stored, [pools[c["case_id"]] for c in stored], labels)
    by_case = {c["case_id"]: r for c, r in zip(stored, reasons, strict=True)}
    if store and stored:
        conn.execute(sa.text(
            "UPDATE retrieval_evaluation_case_results r SET miss_reasons = CAST(u.j AS jsonb) "
            "FROM unnest(CAST(:cases AS text[]), CAST(:js AS text[])) AS u(case_id, j) "
            "WHERE r.evaluation_run_id = CAST(:id AS uuid) AND r.case_id = u.case_id"),
            {"id": str(run_id), "cases": list(by_case),
             "js": [diagnosis.REASONS_JSON.dump_json(r).decode() for r in by_case.values()]})
    summary = diagnosis.summarize(m for r in reasons for m in r)
    if averages is None and run.ndcg_at_k is not None:
        averages = {"ndcg_at_k": run.ndcg_at_k, "recall_at_k": run.recall_at_k,
                    "precision_at_k": run.precision_at_k, "reciprocal_rank": run.reciprocal_rank}
    line = diagnosis.first_line(summary, averages) if averages is not None else None
    return RunDiagnosis(str(run_id), by_case, labels, summary, line)


def hybrid_search_with_trace(conn: sa.Connection, *, knowledge_base_id, query: str, strategy: Strategy,
                             limit: int | None = None) -> RetrievalTrace:
    """Search one question: the batch of one; ``limit`` defaults to ``strategy.final_top_k``."""
    return hybrid_search_batch(conn, knowledge_base_id=knowledge_base_id, queries=[query], strategy=strategy,
                               limits=None if limit is None else [limit])[0]
