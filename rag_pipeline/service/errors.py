"""Which exceptions are the user's to fix (show the message), which report a failed check, which are transient.

Exit codes of every front end that has them (the CLI): 0 success; 1 a check found a problem
(:class:`CheckFailed`: regression gate, invalid labels in ``check-dataset``, ``--strict``); 2 bad input or
configuration (:data:`USER_ERRORS`); 3 the database failed mid-run; 70 an internal error (a bug).
"""

from __future__ import annotations

import sqlalchemy as sa

from rag_pipeline.analysis.comparison import ComparisonError
from rag_pipeline.analysis.tune_runs import TuneError
from rag_pipeline.evaluation.dataset import DatasetError
from rag_pipeline.evaluation.runs import RunNotFoundError
from rag_pipeline.knowledge_base.embedding import EmbeddingError
from rag_pipeline.knowledge_base.lifecycle import KnowledgeBaseError
from rag_pipeline.knowledge_base.sources import SourceError
from rag_pipeline.knowledge_base.textsearch import TextSearchError
from rag_pipeline.retrieval.search import RetrievalError
from rag_pipeline.retrieval.strategies import StrategyError
from rag_pipeline.retrieval.strategy_store import StrategyConflictError
from rag_pipeline.service.catalog import DatasetNotFoundError
from rag_pipeline.service.retention import RetentionError
from rag_pipeline.settings import SettingsError
from rag_pipeline.storage.engine import DatabaseUnreachableError
from rag_pipeline.storage.files import FileReadError
from rag_pipeline.storage.names import InvalidNameError
from rag_pipeline.storage.snapshot_readers import TooManyReadersError
from rag_pipeline.storage.urls import DatabaseError


class CheckFailed(Exception):  # noqa: N818 - it is a result, not a crash
    """A check ran and found a problem (exit 1): nothing is wrong with the input, the measurement says no."""


class LabelsRefused(ValueError):
    """No label of the dataset is a searchable chunk of its knowledge base: a run would measure nothing."""


USER_ERRORS: tuple[type[BaseException], ...] = (
    LabelsRefused,
    SettingsError, DatabaseError, SourceError, TextSearchError, EmbeddingError, KnowledgeBaseError,
    DatasetError, StrategyError, StrategyConflictError, RetrievalError, RunNotFoundError, ComparisonError,
    TuneError, InvalidNameError, FileReadError, TooManyReadersError, RetentionError, DatasetNotFoundError,
)
"""Errors whose message tells the user what to fix: bad input, unknown names, configuration."""

TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    DatabaseUnreachableError, sa.exc.OperationalError, sa.exc.InterfaceError,
)
"""The database did not answer or dropped the connection: worth a bounded retry."""
