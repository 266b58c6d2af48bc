"""JSON Schema (draft 2020-12) of an evaluation report (:mod:`rag_pipeline.evaluation.reports`).

The report is seed §6.3's detail response for a whole run: a ``summary`` of the run and per case the
``case_id``, ids, the judged grades, ``metrics``, ``miss_reasons`` and the candidates the report's
``candidates`` mode lists (``default``: selected + every relevant one; ``all``: the full pool; ``selected``;
``relevant``; ``none``), each with every seed §4.1 field plus its ``relevance_grade``.
``rag-pipeline evaluate --output`` and ``rag-pipeline show`` produce exactly this shape (``--format json``);
``--format jsonl`` writes :data:`JSONL_HEADER_SCHEMA` on the first line, then one :data:`CASE_SCHEMA` per line.

``summary.timings`` (seconds): ``*_wall_s`` / ``embedding_s`` / ``metrics_s`` / ``persistence_s`` / ``total_s``
are elapsed time; ``retrieval_sql_s`` and ``diagnosis_sql_s`` are summed over the reader threads (they overlap,
so they may exceed ``total_s``). ``summary.question_embeddings``: how many question vectors the run reused
from ``question_embeddings`` and how many it embedded (null for runs before it existed or without a vector leg).
"""

from __future__ import annotations

from rag_pipeline.evaluation.metrics import METRIC_NAMES

REPORT_VERSION = 4
"""2: cases have ``relevance_grades``, candidates ``relevance_grade`` (graded labels). 3: ``candidates`` mode,
``summary.question_embeddings``, timings ``retrieval_wall_s`` / ``retrieval_sql_s`` / ``diagnosis_sql_s``. 4: candidates
have ``first_stage_rank`` (the rank before the rerank stage; null without one) and ``vector_completed`` /
``keyword_completed`` (a leg score filled in by ``complete_pool``: the leg did not retrieve the chunk)."""

CANDIDATE_MODE = {"enum": ["default", "all", "selected", "relevant", "none"]}

_NUM_OR_NULL = {"type": ["number", "null"]}
_INT_OR_NULL = {"type": ["integer", "null"]}
_STR_OR_NULL = {"type": ["string", "null"]}
_UUID = {"type": "string", "format": "uuid",
         "pattern": "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"}
_METRICS = {m: {"type": "number", "minimum": 0, "maximum": 1} for m in METRIC_NAMES}
_GRADE = {"type": "integer", "minimum": 0, "maximum": 10}


def _obj(properties: dict, optional: tuple[str, ...] = ()) -> dict:
    return {"type": "object", "additionalProperties": False, "properties": properties,
            "required": [k for k in properties if k not in optional]}


CANDIDATE_SCHEMA = _obj({
    "chunk_id": _UUID,
    "document_id": _UUID,
    "document_name": {"type": "string"},
    "rank": {"type": "integer", "minimum": 1},
    "vector_score": _NUM_OR_NULL,
    "vector_rank": _INT_OR_NULL,
    "keyword_score": _NUM_OR_NULL,
    "keyword_rank": _INT_OR_NULL,
    "rerank_score": _NUM_OR_NULL,
    "first_stage_rank": _INT_OR_NULL,
    "vector_completed": {"type": "boolean"},
    "keyword_completed": {"type": "boolean"},
    "final_score": {"type": "number"},
    "is_relevant": {"type": "boolean"},
    "relevance_grade": {"oneOf": [_GRADE, {"type": "null"}]},
    "is_selected": {"type": "boolean"},
    "strategy_version": {"type": "string"},
    "content": _STR_OR_NULL,
}, optional=("content",))

def _d(schema: dict, description: str) -> dict:
    return {**schema, "description": description}


# One entry of a case's ``miss_reasons`` (diagnosis.MissReason.as_dict): one per relevant chunk.
MISS_REASON_SCHEMA = {**_obj({
    "case_id": {"type": "string"},
    "chunk_id": {"type": "string"},
    "reason": _d({"type": "string"}, "hit, below_cutoff, below_cutoff_after_rerank, vector_only, keyword_only, "
                                     "not_in_pool, or a label status"),
    "k": {"type": "integer", "minimum": 1},
    "rank": _d({"type": "integer"}, "final rank in the pool (pool members only)"),
    "legs": _d({"enum": ["both", "vector", "keyword"]}, "the leg(s) that put the chunk in the pool"),
    "final_score": {"type": "number"}, "kth_score": {"type": "number"},
    "gap": _d({"type": "number"}, "kth_score - final_score, for pool members below k"),
    "vector_score": _d({"type": "number"}, "the chunk's own vector score: from the pool, or computed for the "
                                           "question (a missing leg; absent: no embedding)"),
    "vector_rank": _d({"type": "integer"}, "the chunk's rank in the vector leg's pool; absent when the leg did not "
                                           "return it (its exact rank among every chunk is computed on demand: "
                                           "`rag-pipeline show RUN --case ID --global-ranks`; runs stored before "
                                           "that change may "
                                           "hold it for knowledge bases of at most 20,000 chunks)"),
    "keyword_score": _d({"type": "number"}, "the chunk's own keyword score, as vector_score (absent: no query "
                                            "term in the chunk)"),
    "keyword_rank": _d({"type": "integer"}, "as vector_rank, for the keyword leg"),
    "vector_last_score": _d({"type": "number"}, "score of the last vector-leg member of the pool"),
    "vector_leg_size": {"type": "integer"}, "keyword_last_score": {"type": "number"},
    "keyword_leg_size": {"type": "integer"},
    "enabled_legs": {"type": "array", "items": {"enum": ["vector", "keyword"]}},
    "scores_computed": _d({"type": "boolean"}, "the missing legs' own scores were computed"),
    "label_detail": {"type": "string"},
    "detail": _d({"type": "string"}, "the reason in words"),
    "first_stage_rank": _d({"type": "integer"}, "with a rerank stage: the chunk's rank before it (rank is after)"),
    "rerank_score": _d({"type": "number"}, "with a rerank stage: the chunk's rerank score"),
}, optional=("rank", "first_stage_rank", "rerank_score", "legs", "final_score", "kth_score", "gap", "vector_score", "vector_rank", "keyword_score",
             "keyword_rank", "vector_last_score", "vector_leg_size", "keyword_last_score", "keyword_leg_size",
             "enabled_legs", "scores_computed", "label_detail"))}

CASE_SCHEMA = _obj({
    "case_id": {"type": "string", "minLength": 1},
    "case_index": {"type": "integer", "minimum": 0},
    "question": {"type": "string"},
    "k": {"type": "integer", "minimum": 1},
    "retrieved_chunk_ids": {"type": "array", "items": _UUID},
    "relevant_chunk_ids": {"type": "array", "items": _UUID, "minItems": 1},
    "relevance_grades": {"type": "object", "minProperties": 1, "propertyNames": _UUID,
                         "additionalProperties": _GRADE},
    "first_relevant_rank": _INT_OR_NULL,
    "metrics": _obj(_METRICS),
    "miss_reasons": {"type": ["array", "null"], "items": MISS_REASON_SCHEMA},
    "candidates": {"type": "array", "items": CANDIDATE_SCHEMA},
})

SUMMARY_SCHEMA = _obj({
    "run_id": _UUID,
    "status": {"enum": ["queued", "running", "succeeded", "failed", "abandoned"]},
    "is_current": {"type": "boolean"},
    "strategy_version": {"type": "string"},
    "params_hash": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
    "strategy_params": {"type": "object"},
    "embedding_model": _STR_OR_NULL,
    "dataset": _obj({"id": _UUID, "name": {"type": "string"}, "version": {"type": "string"},
                     "source_path": _STR_OR_NULL, "case_count": {"type": "integer"}}),
    # version: the knowledge base's content version the run measured (null: a run older than migration 0004)
    "knowledge_base": _obj({"id": _UUID, "name": {"type": "string"},
                            "version": {"type": ["string", "null"], "pattern": "^[0-9a-f]{64}$"}}),
    **dict.fromkeys(METRIC_NAMES, _NUM_OR_NULL),
    "case_count": {"type": "integer", "minimum": 0},
    "candidate_count": {"type": "integer", "minimum": 0},
    "counts": {"type": ["object", "null"]},
    "timings": {"type": ["object", "null"], "additionalProperties": {"type": "number"}},
    "question_embeddings": {"oneOf": [{"type": "null"}, _obj({"reused": {"type": "integer", "minimum": 0},
                                                               "embedded": {"type": "integer", "minimum": 0}})]},
    "partition_key": _STR_OR_NULL,
    "dagster_run_id": _STR_OR_NULL,
    "error": _STR_OR_NULL,
    "started_at": {"type": "string"},
    "finished_at": _STR_OR_NULL,
    "queued_at": _STR_OR_NULL,
    "cases_done": {"type": "integer", "minimum": 0},
})

REPORT_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": f"https://rag-pipeline.invalid/schemas/evaluation-report-v{REPORT_VERSION}.json",
    "title": "rag_pipeline retrieval evaluation report",
    **_obj({
        "report_version": {"const": REPORT_VERSION},
        "candidates": CANDIDATE_MODE,
        "summary": SUMMARY_SCHEMA,
        "cases": {"type": "array", "items": CASE_SCHEMA},
    }),
}

JSONL_HEADER_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "rag_pipeline retrieval evaluation report, JSON Lines header (then one case per line)",
    **_obj({"report_version": {"const": REPORT_VERSION}, "candidates": CANDIDATE_MODE, "summary": SUMMARY_SCHEMA}),
}
