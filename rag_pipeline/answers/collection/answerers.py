"""The answerers shipped with the project, by name: what ``answers collect --answerer NAME`` runs (an
:class:`Answerer`: an ``identity`` ``NAME@<params hash prefix>`` and ``answer_cases(cases)`` yielding answer lines)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import sqlalchemy as sa

from rag_pipeline.contracts.answers import AnswerRecord
from rag_pipeline.contracts.errors import BadInputError
from rag_pipeline.evaluation.datasets.load import EvaluationCase
from rag_pipeline.retrieval.strategies import Strategy, get_strategy

from . import extractive

DEFAULT_STRATEGY = "hybrid-v1"
"""The strategy an answerer retrieves with unless told (the project's default strategy)."""


class Answerer(Protocol):
    """What the answer collector calls."""

    @property
    def identity(self) -> str: ...

    def answer_cases(self, cases: Sequence[EvaluationCase]) -> Iterator[AnswerRecord]: ...


class AnswererError(BadInputError, ValueError):
    """An unknown answerer name or a bad parameter; the message names it."""


_FACTORIES: dict[str, Callable[..., Answerer]] = {extractive.NAME: extractive.ExtractiveAnswerer}
ANSWERER_NAMES: tuple[str, ...] = tuple(_FACTORIES)


def get_answerer(name: str, *, engine: sa.Engine, knowledge_base: str, strategy: str | Strategy | None = None,
                 **params: Any) -> Answerer:
    """The answerer ``name`` over ``knowledge_base`` with ``strategy`` and ``params``, else :class:`AnswererError`."""
    factory = _FACTORIES.get(name)
    if factory is None:
        raise AnswererError(f"unknown answerer {name!r}; known answerers: {', '.join(ANSWERER_NAMES)}")
    resolved = get_strategy(strategy or DEFAULT_STRATEGY) if not isinstance(strategy, Strategy) else strategy
    try:
        return factory(engine, knowledge_base, resolved, **params)
    except TypeError as exc:
        raise AnswererError(f"answerer {name!r}: {exc}") from None
    except ValueError as exc:
        raise AnswererError(str(exc)) from None
