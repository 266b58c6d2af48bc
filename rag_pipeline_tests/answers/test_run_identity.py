"""An answer run's identity (answerer name and version, scoring version) and the "wrong but confident" rule,
without a database (docs/design.md §12.6)."""

from __future__ import annotations

import hashlib
import importlib

from rag_pipeline.answers.runs import queries
from rag_pipeline.answers.runs.persistence import answerer_identity, scoring_version
from rag_pipeline.contracts.answers import (
    ANSWER_METRIC_NAMES,
    VERDICTS,
    AnswerCaseResult,
    AnswerCitation,
    AnswerMetrics,
    AnswerScoring,
)
from rag_pipeline.service.answers import is_wrong_but_confident


def test_the_answerer_name_splits_into_name_and_version() -> None:
    assert answerer_identity("extractive-v1@3f2a9c") == ("extractive-v1", "3f2a9c")
    assert answerer_identity("me@home@2") == ("me@home", "2"), "split at the last @"
    assert answerer_identity("bot") == ("bot", hashlib.sha256(b"bot").hexdigest()[:12])
    assert answerer_identity("bot@") == ("bot@", hashlib.sha256(b"bot@").hexdigest()[:12]), "no version after @"
    unnamed = ("unnamed", hashlib.sha256(b"unnamed").hexdigest()[:12])
    assert answerer_identity(None) == answerer_identity("  ") == unnamed


def test_the_scoring_version_follows_every_setting() -> None:
    base = scoring_version(AnswerScoring())
    assert base == scoring_version(AnswerScoring()) and len(base) == 64
    others = {scoring_version(AnswerScoring(f1_correct_threshold=0.7)), scoring_version(AnswerScoring(support_ngram=3)),
              scoring_version(AnswerScoring(support_threshold=0.5)),
              scoring_version(AnswerScoring(refusal_phrases=("no idea",)))}
    assert len(others) == 4 and base not in others


def _case(*, score: float | None = -1, refused: bool = False, status: str = "ok", support: float | None = None,
          cited: int = 0) -> AnswerCaseResult:
    citations = [AnswerCitation(chunk_id=f"c{i}", is_relevant=False, is_retrieved=None, in_knowledge_base=True,
                                is_valid=True) for i in range(cited)]
    return AnswerCaseResult(
        case_id="q", question="?", answer=None if status == "missing" else "a", status=status, reference_answers=["r"],
        answerable=True, refused=refused, refusal_source="none", verdict="generation_miss", verdict_reason="",
        answer_metrics=AnswerMetrics(answer_score=score, lexical_support=support, refused=refused),
        citations=citations)


def test_wrong_but_confident_is_a_wrong_answer_that_cites_or_is_supported() -> None:
    assert is_wrong_but_confident(_case(cited=1))
    assert is_wrong_but_confident(_case(support=0.5))
    assert not is_wrong_but_confident(_case(support=0.49))
    assert not is_wrong_but_confident(_case()), "no citation, no support: wrong but not confident"
    assert not is_wrong_but_confident(_case(score=1, cited=1)), "right"
    assert not is_wrong_but_confident(_case(score=0, cited=1)), "a refusal scores 0"
    assert not is_wrong_but_confident(_case(refused=True, cited=1))
    assert not is_wrong_but_confident(_case(status="error", cited=1, score=None))


def test_the_statements_and_the_migration_name_the_contracts_metrics_and_verdicts() -> None:
    migration = importlib.import_module("rag_pipeline.storage.migrations.versions.0007_answer_runs")
    assert queries.INSERTED_METRIC_COLUMNS == ANSWER_METRIC_NAMES == migration.METRICS
    assert migration.VERDICTS == VERDICTS
    columns = queries.INSERT_RUN.text.split("(", 1)[1].split(")", 1)[0]
    for named in ([c.strip() for c in columns.split(",")], queries.CASE_COLUMNS):
        assert tuple(c for c in named if c in ANSWER_METRIC_NAMES) == ANSWER_METRIC_NAMES
