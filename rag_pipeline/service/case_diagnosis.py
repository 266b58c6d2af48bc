"""One case of a stored run diagnosed on demand with the exact global leg ranks of its missed relevant chunks
(docs/design.md §4.3; ``rag-pipeline show RUN --case ID --global-ranks``), cached per knowledge-base state."""

from __future__ import annotations

import threading
from collections import OrderedDict

import sqlalchemy as sa

from rag_pipeline.contracts.reports import CaseDiagnosis
from rag_pipeline.evaluation.diagnosis import diagnose as diagnosis_db
from rag_pipeline.evaluation.runs.lifecycle import RunNotFoundError, resolve_run_id
from rag_pipeline.evaluation.runs.queries import knowledge_base_state

CACHE_SIZE = 256


_cache: OrderedDict[tuple[str, str, str], CaseDiagnosis] = OrderedDict()
_lock = threading.Lock()


def case_diagnosis(engine: sa.Engine, run_id: str, case_id: str) -> CaseDiagnosis:
    """Diagnose case ``case_id`` of run ``run_id`` (UUID or unique prefix) with exact global ranks."""
    with engine.connect() as conn:
        run_uuid = str(resolve_run_id(conn, run_id))
        state = knowledge_base_state(conn, run_uuid)
        if state is None:  # the run's knowledge base was deleted
            raise RunNotFoundError(f"run {run_uuid}: its knowledge base no longer exists")
        key = (run_uuid, case_id, state)
        with _lock:
            if key in _cache:
                _cache.move_to_end(key)
                return _cache[key]
        found = diagnosis_db.diagnose_case(conn, run_uuid, case_id)
    if found is None:
        raise RunNotFoundError(f"run {run_uuid} has no case {case_id!r} (see `rag-pipeline show {run_uuid[:8]}`)")
    case, reasons = found
    result = CaseDiagnosis(run_id=run_uuid, case_id=str(case["case_id"]), question=str(case["question"]),
                           k=int(case["k"]), reasons=reasons, stored_reasons=case["miss_reasons"],
                           knowledge_base_state=state)
    with _lock:
        _cache[key] = result
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return result
