"""The candidate pools' binary COPY tuples (``results.candidate_tuples``, encoded as columns) against a reference
written from PostgreSQL's binary COPY format field by field (``struct``), over every NULL pattern."""

from __future__ import annotations

import itertools
import struct
import uuid

from rag_pipeline.evaluation.datasets.load import EvaluationCase
from rag_pipeline.evaluation.runs import results
from rag_pipeline.retrieval.trace import Candidate, RetrievalTrace

RUN = uuid.UUID("6f1c1f5e-3a43-4d4c-9d55-0123456789ab")


def _field(fmt: str | None, value) -> bytes:
    """One field: its length (int32), then its big-endian value; NULL: length -1 and nothing."""
    if value is None:
        return struct.pack(">i", -1)
    if fmt == "uuid":
        return struct.pack(">i", 16) + uuid.UUID(value).bytes
    body = struct.pack(fmt, value)
    return struct.pack(">i", len(body)) + body


def _reference(offset: int, batch, traces) -> bytes:
    out = []
    for i, (case, trace) in enumerate(zip(batch, traces, strict=True)):
        for c in trace.candidates:
            grade = case.grades.get(c.chunk_id)
            fields = [("uuid", str(RUN)), (">i", offset + i), ("uuid", c.chunk_id), (">i", c.rank),
                      (">d", c.vector_score), (">h", c.vector_rank), (">d", c.keyword_score), (">i", c.keyword_rank),
                      (">d", c.rerank_score), (">d", c.final_score), (">?", c.rank <= len(trace.selected)),
                      (">h", grade)]
            out.append(struct.pack(">h", len(fields)) + b"".join(_field(f, v) for f, v in fields))
    return b"".join(out)


def _traces():
    """Three cases whose candidates take every combination of present and missing leg fields, a rerank score or
    none, a judged grade (0 included) or none; the third case has no candidate."""
    ids = [str(uuid.UUID(int=n * 7919 + 11)) for n in range(40)]
    patterns = list(itertools.product([True, False], repeat=4))
    cands, judged_ids = [], []
    for n, (vector, keyword, rerank, judged) in enumerate(patterns + patterns):
        if judged:
            judged_ids.append(ids[n])
        cands.append(Candidate(ids[n], "d", "doc", n % 24 + 1, 0.1 * n - 1.5 if vector else None,
                               n + 1 if vector else None, 3.25 * n if keyword else None,
                               1000 + n if keyword else None, -0.5 / (n + 1) if rerank else None,
                               1.0 / (n + 3), "v1"))
    cands[30] = cands[30]._replace(rank=1500, vector_rank=1023, keyword_rank=2000)  # past the packed table
    first, second = cands[:24], cands[24:]
    grades_a = {c.chunk_id: n % 3 for n, c in enumerate(first) if c.chunk_id in judged_ids}
    grades_b = {second[0].chunk_id: 4}
    batch = [EvaluationCase("a", "q a", tuple(sorted(k for k, g in grades_a.items() if g >= 1)), 5,
                            tuple(sorted(grades_a.items()))),
             EvaluationCase("b", "q b", tuple(grades_b), 3, tuple(grades_b.items())),
             EvaluationCase("c", "q c", (ids[39],), 2)]
    traces = [RetrievalTrace("q a", first, first[:5]), RetrievalTrace("q b", second, second[:3]),
              RetrievalTrace("q c", [], [])]
    return batch, traces


def test_candidate_tuples_equal_the_field_by_field_encoding():
    batch, traces = _traces()
    kept: dict[str, bytes] = {}
    data, n = results.candidate_tuples(RUN, 40, batch, traces, kept)
    assert n == 32
    assert data == _reference(40, batch, traces)
    assert len(kept) == 32  # each chunk id encoded once, kept for the run's next batches
    again, _ = results.candidate_tuples(RUN, 40, batch, traces, kept)
    assert again == data


def test_a_batch_without_candidates_is_no_tuple():
    batch, traces = _traces()
    assert results.candidate_tuples(RUN, 0, batch[2:], traces[2:]) == (b"", 0)
