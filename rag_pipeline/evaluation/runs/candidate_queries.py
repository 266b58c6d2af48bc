"""Statements on the stored candidate pools (the view ``retrieval_evaluation_candidates``)."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from rag_pipeline.contracts.reports import Candidate

_MODE_FILTERS = {"default": " AND (c.is_selected OR c.is_relevant)", "all": "", "selected": " AND c.is_selected",
                 "relevant": " AND c.is_relevant"}
_NAME = "coalesce(c.document_name, x.external_id, '(no such chunk)') AS document_name"
"""A chunk no longer (or never) in the knowledge base: its external id (an imported run's document), else that."""
_EXTERNAL = (" LEFT JOIN external_chunk_ids x ON x.chunk_id = c.chunk_id AND x.knowledge_base_id = "
             "(SELECT knowledge_base_id FROM retrieval_evaluation_runs WHERE id = c.evaluation_run_id)")
_TEXT = (", coalesce(ch.content, CASE WHEN x.content IS NOT NULL THEN concat_ws(E'\\n\\n', nullif(x.title, ''), "
         "x.content) END) AS content")
"""The chunk's text: our chunk table's, else an external system's catalogued one (its title first)."""
_REPORT_SQL = """
SELECT c.case_id, c.chunk_id::text AS chunk_id, coalesce(c.document_id::text, '') AS document_id, {name}, c.rank,
       c.vector_score, c.vector_rank, c.keyword_score, c.keyword_rank, c.rerank_score, NULL AS first_stage_rank,
       c.vector_score IS NOT NULL AND c.vector_rank IS NULL AS vector_completed,
       c.keyword_score IS NOT NULL AND c.keyword_rank IS NULL AS keyword_completed,
       c.final_score, c.is_relevant, c.relevance_grade, c.is_selected, c.strategy_version{text}
FROM retrieval_evaluation_candidates c{external}{join}
WHERE c.evaluation_run_id = :run AND c.case_id = ANY(:cases){mode}
ORDER BY c.case_id, c.rank
"""


def report_candidates(conn: sa.Connection, run_id, cases: Sequence[str], mode: str,
                      include_text: bool) -> dict[str, list[Candidate]]:
    """Case id → the candidates that candidate mode ``mode`` lists, by rank (``first_stage_rank`` unset);
    ``include_text``: with the chunk's ``content``."""
    statement = sa.text(_REPORT_SQL.format(
        name=_NAME, external=_EXTERNAL, text=_TEXT if include_text else "",
        join=" LEFT JOIN document_chunks ch ON ch.id = c.chunk_id" if include_text else "",
        mode=_MODE_FILTERS.get(mode, "")))
    pools: dict[str, list[Candidate]] = {case: [] for case in cases}
    result = conn.execute(statement, {"run": run_id, "cases": list(cases)})
    fields = [k for k in result.keys() if k in Candidate.model_fields]  # noqa: SIM118 - the columns; a mapping validates twice as fast
    for row in result:
        pools[row.case_id].append(Candidate.model_validate(dict(zip(fields, (row._mapping[k] for k in fields),
                                                                    strict=True))))
    return pools


def pools_of_run(conn, run_id) -> Sequence[sa.RowMapping]:
    """Every candidate of a run with its leg scores and ranks, by case and rank (``conn``: a connection or a
    session)."""
    return conn.execute(sa.text(
        "SELECT case_id, chunk_id::text AS chunk_id, rank, vector_score, vector_rank, keyword_score, "
        "keyword_rank, rerank_score, final_score, is_relevant, strategy_version "
        "FROM retrieval_evaluation_candidates WHERE evaluation_run_id = CAST(:run_id AS uuid) "
        "ORDER BY case_id, rank"), {"run_id": str(run_id)}).mappings().all()


def leg_scores(conn: sa.Connection, run_id, cases: list[str]) -> Sequence[sa.RowMapping]:
    """The leg scores and ranks of every candidate of the cases."""
    return conn.execute(sa.text("""
SELECT c.case_id, c.chunk_id::text AS chunk_id, c.vector_score, c.vector_rank, c.keyword_score, c.keyword_rank
FROM retrieval_evaluation_candidates c
WHERE c.evaluation_run_id = :run AND c.case_id = ANY(:cases)
"""), {"run": run_id, "cases": cases}).mappings().all()


def pool_of_case(conn: sa.Connection, run_id, case_id: str) -> Sequence[sa.RowMapping]:
    """One case's pool by rank: chunk id, rank, leg scores and ranks, final score."""
    return conn.execute(sa.text(
        "SELECT chunk_id::text AS chunk_id, rank, vector_score, vector_rank, keyword_score, keyword_rank, "
        "final_score FROM retrieval_evaluation_candidates WHERE evaluation_run_id = CAST(:id AS uuid) "
        "AND case_id = :case ORDER BY rank"), {"id": str(run_id), "case": case_id}).mappings().all()


def top_candidates(conn: sa.Connection, run_ids: list[str], cases: list[str], top: int) -> Sequence[sa.Row]:
    """The candidates ranked ``top`` or better of the cases in the runs, by rank."""
    return conn.execute(sa.text(
        f"SELECT c.evaluation_run_id::text AS run_id, c.case_id, c.chunk_id::text AS chunk_id, {_NAME}, c.rank, "
        f"c.is_relevant FROM retrieval_evaluation_candidates c{_EXTERNAL} "
        "WHERE c.evaluation_run_id = ANY(CAST(:runs AS uuid[])) "
        "AND c.case_id = ANY(:cases) AND c.rank <= :top ORDER BY c.rank"),
        {"runs": run_ids, "cases": cases, "top": top}).all()


def copy_pools(conn: sa.Connection, new_run, old_run, case_ids: Sequence[str],
               grades: Sequence[tuple[int, str, int]]) -> int:
    """Copy run ``old_run``'s stored pools of ``case_ids`` into run ``new_run`` (its partition made), the i-th case
    id as case index i; each candidate's grade from ``grades`` (``case index, chunk id, grade``; absent: not
    judged). Ranks, scores and selection are kept. Returns the candidates copied."""
    idx, chunk, grade = (list(x) for x in zip(*grades, strict=True)) if grades else ([], [], [])
    return conn.execute(sa.text("""
INSERT INTO retrieval_evaluation_candidate_rows (evaluation_run_id, case_index, chunk_id, rank, vector_score,
    vector_rank, keyword_score, keyword_rank, rerank_score, final_score, is_selected, relevance_grade)
SELECT CAST(:new AS uuid), m.ord - 1, c.chunk_id, c.rank, c.vector_score, c.vector_rank, c.keyword_score,
       c.keyword_rank, c.rerank_score, c.final_score, c.is_selected, g.grade
FROM unnest(CAST(:cases AS text[])) WITH ORDINALITY AS m(case_id, ord)
JOIN retrieval_evaluation_case_results r ON r.evaluation_run_id = CAST(:old AS uuid) AND r.case_id = m.case_id
JOIN retrieval_evaluation_candidate_rows c ON c.evaluation_run_id = r.evaluation_run_id AND c.case_index = r.case_index
LEFT JOIN unnest(CAST(:g_idx AS int4[]), CAST(:g_chunk AS uuid[]), CAST(:g_grade AS int2[])) AS g(case_index,
    chunk_id, grade) ON g.case_index = m.ord - 1 AND g.chunk_id = c.chunk_id
"""), {"new": str(new_run), "old": str(old_run), "cases": list(case_ids), "g_idx": idx, "g_chunk": chunk,
       "g_grade": grade}).rowcount


def unjudged_top_k(conn: sa.Connection, run_ids: Sequence[str]) -> Sequence[sa.Row]:
    """``run_id, case_id, chunk_id, rank`` of every candidate ranked k or better in an answerable case of the runs
    that the run's labels do not grade, by case and rank."""
    return conn.execute(sa.text(
        "SELECT r.evaluation_run_id::text AS run_id, r.case_id, c.chunk_id::text AS chunk_id, c.rank "
        "FROM retrieval_evaluation_case_results r JOIN retrieval_evaluation_candidate_rows c "
        "ON c.evaluation_run_id = r.evaluation_run_id AND c.case_index = r.case_index AND c.rank <= r.k "
        "WHERE r.evaluation_run_id = ANY(CAST(:runs AS uuid[])) AND r.relevant_chunk_ids <> '[]'::jsonb "
        "AND c.relevance_grade IS NULL ORDER BY r.case_index, c.rank"), {"runs": [str(r) for r in run_ids]}).all()
