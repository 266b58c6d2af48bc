"""Which exceptions are the user's to fix (show the message) and which are transient (retry)."""

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
from rag_pipeline.settings import SettingsError
from rag_pipeline.storage.engine import DatabaseUnreachableError
from rag_pipeline.storage.urls import DatabaseError

USER_ERRORS: tuple[type[BaseException], ...] = (
    SettingsError, DatabaseError, SourceError, TextSearchError, EmbeddingError, KnowledgeBaseError,
    DatasetError, StrategyError, StrategyConflictError, RetrievalError, RunNotFoundError, ComparisonError,
    TuneError,
)
"""Errors whose message tells the user what to fix: bad input, unknown names, configuration."""

TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    DatabaseUnreachableError, sa.exc.OperationalError, sa.exc.InterfaceError,
)
"""The database did not answer or dropped the connection: worth a bounded retry."""
