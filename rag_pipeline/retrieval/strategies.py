"""Versioned retrieval strategies: named, immutable parameter sets loaded from YAML.

A strategy version (``hybrid-v1``, ``bm25-v1``, ...) fixes every parameter of
the hybrid retrieval an evaluation run uses: which embedding model and
text-search configuration, how many candidates each leg contributes to the
pool, how the keyword leg scores, and how the two legs are fused and cut.
Runs record the version *and* :meth:`Strategy.params_hash`, so a result can
always be traced back to the exact parameters that produced it.

The registry lives in ``rag_pipeline/retrieval/strategies.yaml`` (override with the
``RAG_STRATEGIES_FILE`` environment variable)::

    strategies:
      - version: hybrid-v1
        description: ...
        embedding_model: use-multilingual-v3
        ...

Every :class:`Strategy` is validated on construction; any invalid value raises
:class:`StrategyError` naming the strategy version and the offending field.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

STRATEGIES_FILE_ENV = "RAG_STRATEGIES_FILE"
PACKAGED_STRATEGIES_FILE = Path(__file__).resolve().parent / "strategies.yaml"

EMBEDDING_MODELS = ("use-multilingual-v3", "all-minilm-l6-v2")
TEXT_SEARCH_MODES = ("kb", "simple", "english", "chinese")
KEYWORD_SCORERS = ("ts_rank_cd", "bm25")
FUSIONS = ("weighted", "rrf")
NORMALIZATIONS = ("none", "minmax", "zscore", "rank", "dbsf")
MAX_EF_SEARCH = 1000  # pgvector's upper bound for hnsw.ef_search

_VERSION_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_IDENTITY_FIELDS = ("version", "description")


class StrategyError(ValueError):
    """An invalid strategy definition, registry file or version lookup."""


@dataclass(frozen=True)
class Strategy:
    """One immutable, fully specified retrieval strategy version.

    ``text_search="kb"`` uses the knowledge base's configured text-search mode.
    A candidate k of 0 disables that leg. ``keyword_scorer="ts_rank_cd"`` is
    Postgres ``ts_rank_cd(tsv, q, 32)`` (= rank / (rank + 1)); ``"bm25"`` uses
    ``bm25_k1`` / ``bm25_b``. The weights apply to both fusion methods (RRF
    contributions are ``weight / (rrf_k + rank)``). ``final_top_k`` is the
    business-path default; an evaluation case's own k wins.
    """

    version: str
    description: str = ""
    embedding_model: str = "use-multilingual-v3"
    text_search: str = "kb"
    vector_candidate_k: int = 10
    keyword_candidate_k: int = 10
    keyword_scorer: str = "ts_rank_cd"
    bm25_k1: float = 0.9
    bm25_b: float = 0.4
    fusion: str = "weighted"
    vector_weight: float = 0.7
    keyword_weight: float = 0.3
    normalization: str = "none"
    rrf_k: int = 60
    final_top_k: int = 10
    ef_search: int = 100

    def __post_init__(self) -> None:
        """Type-check, coerce int-valued floats to float, and validate every field."""
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "float":
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    self._fail(f.name, f"must be a number, got {value!r}")
                if not math.isfinite(value):
                    self._fail(f.name, f"must be finite, got {value!r}")
                object.__setattr__(self, f.name, float(value))
            elif f.type == "int" and (isinstance(value, bool) or not isinstance(value, int)):
                self._fail(f.name, f"must be an integer, got {value!r}")
            elif f.type == "str" and not isinstance(value, str):
                self._fail(f.name, f"must be a string, got {value!r}")
        self._validate()

    def _fail(self, field: str, problem: str) -> None:
        raise StrategyError(f"strategy {self.version!r}: field {field!r} {problem}")

    def _validate(self) -> None:
        if not _VERSION_PATTERN.fullmatch(self.version):
            self._fail("version", "must be non-empty letters, digits, '.', '_' or '-'")
        for field, allowed in (
            ("embedding_model", EMBEDDING_MODELS),
            ("text_search", TEXT_SEARCH_MODES),
            ("keyword_scorer", KEYWORD_SCORERS),
            ("fusion", FUSIONS),
            ("normalization", NORMALIZATIONS),
        ):
            if getattr(self, field) not in allowed:
                self._fail(field, f"is {getattr(self, field)!r}; expected one of {list(allowed)}")
        for field in ("vector_candidate_k", "keyword_candidate_k", "bm25_k1",
                      "vector_weight", "keyword_weight", "rrf_k"):
            if getattr(self, field) < 0:
                self._fail(field, f"must be >= 0, got {getattr(self, field)!r}")
        if self.vector_candidate_k == 0 and self.keyword_candidate_k == 0:
            self._fail("vector_candidate_k", "and keyword_candidate_k are both 0 (no leg enabled)")
        enabled_weights = [w for k, w in ((self.vector_candidate_k, self.vector_weight),
                                          (self.keyword_candidate_k, self.keyword_weight)) if k > 0]
        if not any(enabled_weights):
            self._fail("vector_weight", "and keyword_weight are 0 for every enabled leg")
        if not 0.0 <= self.bm25_b <= 1.0:
            self._fail("bm25_b", f"must be in [0, 1], got {self.bm25_b!r}")
        if self.fusion == "rrf" and self.normalization != "none":
            self._fail("normalization", "must be 'none' with fusion 'rrf' (RRF uses ranks only)")
        if self.final_top_k < 1:
            self._fail("final_top_k", f"must be >= 1, got {self.final_top_k!r}")
        if not 1 <= self.ef_search <= MAX_EF_SEARCH:
            self._fail("ef_search", f"must be in [1, {MAX_EF_SEARCH}], got {self.ef_search!r}")
        if self.ef_search < self.vector_candidate_k:
            self._fail("ef_search", f"({self.ef_search}) must be >= vector_candidate_k "
                       f"({self.vector_candidate_k}); HNSW returns at most ef_search rows")

    def params(self) -> dict[str, Any]:
        """Every parameter except ``version`` / ``description``, in field order."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in _IDENTITY_FIELDS}

    def params_hash(self) -> str:
        """SHA-256 hex of the canonical JSON of :meth:`params`.

        Canonical form: keys sorted, separators ``","`` / ``":"``, floats
        written by ``repr`` (ints given for float fields are coerced first, so
        ``1`` and ``1.0`` hash alike). The description does not participate.
        """
        canonical = json.dumps(self.params(), sort_keys=True, separators=(",", ":"),
                               allow_nan=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


FIELD_NAMES = tuple(f.name for f in fields(Strategy))


def strategy_from_mapping(entry: Any, where: str = "") -> Strategy:
    """Build a :class:`Strategy` from one registry entry (a mapping of field names).

    Missing parameters take the dataclass defaults; unknown keys are an error.
    ``where`` prefixes error messages (e.g. the file and list index).
    """
    prefix = f"{where}: " if where else ""
    if not isinstance(entry, Mapping):
        raise StrategyError(f"{prefix}entry must be a mapping, got {type(entry).__name__}")
    if "version" not in entry:
        raise StrategyError(f"{prefix}entry has no 'version' key")
    unknown = sorted(str(key) for key in entry if key not in FIELD_NAMES)
    if unknown:
        raise StrategyError(f"{prefix}strategy {entry['version']!r}: unknown key(s) {unknown}; "
                            f"known keys: {list(FIELD_NAMES)}")
    try:
        return Strategy(**entry)
    except StrategyError as exc:
        raise StrategyError(f"{prefix}{exc}") from None


def parse_registry(data: Any, source: str = "<registry>") -> dict[str, Strategy]:
    """Validate already-parsed registry YAML (``{"strategies": [...]}``) into version -> Strategy."""
    if not isinstance(data, Mapping) or "strategies" not in data:
        raise StrategyError(f"{source}: expected a mapping with a top-level 'strategies' list")
    extra = sorted(str(key) for key in data if key != "strategies")
    if extra:
        raise StrategyError(f"{source}: unknown top-level key(s) {extra}")
    entries = data["strategies"]
    if not isinstance(entries, list) or not entries:
        raise StrategyError(f"{source}: 'strategies' must be a non-empty list")
    registry: dict[str, Strategy] = {}
    for index, entry in enumerate(entries):
        strategy = strategy_from_mapping(entry, where=f"{source}: strategies[{index}]")
        if strategy.version in registry:
            raise StrategyError(f"{source}: duplicate strategy version {strategy.version!r}")
        registry[strategy.version] = strategy
    return registry


def registry_path(path: str | Path | None = None) -> Path:
    """The registry file to read: ``path``, else ``$RAG_STRATEGIES_FILE``, else the packaged file."""
    if path is not None:
        return Path(path)
    override = os.environ.get(STRATEGIES_FILE_ENV)
    return Path(override) if override else PACKAGED_STRATEGIES_FILE


def load_registry(path: str | Path | None = None) -> dict[str, Strategy]:
    """Load and validate the strategy registry; see :func:`registry_path` for the file chosen."""
    resolved = registry_path(path)
    try:
        data = yaml.safe_load(resolved.read_text(encoding="utf-8"))
    except OSError as exc:
        raise StrategyError(f"cannot read strategies file {resolved}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise StrategyError(f"invalid YAML in strategies file {resolved}: {exc}") from exc
    return parse_registry(data, source=str(resolved))


def get_strategy(version: str, registry: Mapping[str, Strategy] | None = None) -> Strategy:
    """Look up one version (in ``registry``, default :func:`load_registry`)."""
    strategies = load_registry() if registry is None else registry
    try:
        return strategies[version]
    except KeyError:
        raise StrategyError(f"unknown strategy version {version!r}; known versions: "
                            f"{', '.join(sorted(strategies))}") from None


def strategy_to_yaml(strategy: Strategy) -> str:
    """A complete registry entry, indented to paste under the top-level ``strategies:`` key."""
    entry = {name: getattr(strategy, name) for name in FIELD_NAMES}
    text = yaml.safe_dump([entry], sort_keys=False, allow_unicode=True, width=10**9)
    return "".join("  " + line for line in text.splitlines(keepends=True))
