"""Versioned retrieval strategies (docs/design.md §3.2): named, immutable parameter sets loaded from YAML
(``rag_pipeline/retrieval/strategies.yaml``, or ``RAG_STRATEGIES_FILE``); an invalid value is a
:class:`StrategyError` naming the version and the field."""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from rag_pipeline.contracts.errors import BadInputError
from rag_pipeline.knowledge_base.embedding import EMBEDDING_MODELS, is_model_name
from rag_pipeline.retrieval.fusion import NORMALIZATIONS
from rag_pipeline.retrieval.http_strategy import HttpRetriever
from rag_pipeline.settings import get_settings
from rag_pipeline.storage.files import FileReadError, read_bounded
from rag_pipeline.storage.names import STRATEGY_VERSION, InvalidNameError, check_name, name_rule, printable, show_name

PACKAGED_STRATEGIES_FILE = Path(__file__).resolve().parent / "strategies.yaml"

TEXT_SEARCH_MODES = ("kb", "simple", "english", "chinese", "mixed")
KEYWORD_SCORERS = ("ts_rank_cd", "bm25")
FUSIONS = ("weighted", "rrf")
RERANK_METHODS = ("embedding", "cross-encoder")
VECTOR_SEARCHES = ("hnsw", "exact")  # the vector leg: the model's HNSW index, or every vector scored
RERANK_NORMALIZATIONS = tuple(n for n in NORMALIZATIONS if n != "rank")  # rank needs leg ranks
MAX_EF_SEARCH = 1000  # pgvector's upper bound for hnsw.ef_search
MAX_STRATEGIES_FILE_BYTES = 1024 * 1024  # a strategies file is read through the bounded reader

_IDENTITY_FIELDS = ("version", "description")
# Optional stages and the vector search mode: left out of params() (and so of params_hash()) while at their default,
# so every version defined before they existed keeps its hash and its stored runs.
OPTIONAL_FIELDS = {"complete_pool": False, "rerank": None, "vector_search": "hnsw", "http": None}
HTTP_KIND = "http"
"""A strategy with an ``http`` block is of this kind: its ranking comes from the user's retriever over HTTP."""
_CHOICES = {"text_search": TEXT_SEARCH_MODES,
            "keyword_scorer": KEYWORD_SCORERS, "fusion": FUSIONS, "normalization": NORMALIZATIONS,
            "vector_search": VECTOR_SEARCHES}
_RERANK_CHOICES = {"method": RERANK_METHODS, "normalization": RERANK_NORMALIZATIONS}
_UNSET: Any = object()


def _embedding_model(value: str) -> str:
    """A shipped model, or a name an endpoint model may have (whether it is registered is checked when it runs)."""
    if value not in EMBEDDING_MODELS and not is_model_name(value):
        raise ValueError(f"is {value!r}; expected one of {list(EMBEDDING_MODELS)} or the name of an endpoint model "
                         "(rag-pipeline embeddings add-endpoint)")
    return value


def _one_of(value: str, info: ValidationInfo, choices: dict[str, tuple[str, ...]]) -> str:
    """A field restricted to its ``choices`` (the message pydantic reports under the field's name)."""
    assert info.field_name is not None, "a field validator's"
    allowed = choices[info.field_name]
    if value not in allowed:
        raise ValueError(f"is {value!r}; expected one of {list(allowed)}")
    return value


class StrategyError(BadInputError, ValueError):
    """An invalid strategy definition, registry file or version lookup."""


class Rerank(BaseModel):
    """A second stage that re-scores the first stage's pool (or its top ``top_n``): ``embedding`` (cosine under a
    model whose vectors the knowledge base stores) or ``cross-encoder`` (a local directory); docs/design.md §3.2."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid", allow_inf_nan=False)

    method: str
    model: str
    top_n: int | None = Field(None, ge=1)
    weight: float = Field(1.0, ge=0, le=1)
    normalization: str = "minmax"
    batch_size: int = Field(32, ge=1, le=4096)

    @field_validator(*_RERANK_CHOICES)
    @classmethod
    def _one_of(cls, value: str, info: ValidationInfo) -> str:
        return _one_of(value, info, _RERANK_CHOICES)

    @model_validator(mode="after")
    def _model(self) -> Rerank:
        if self.method == "embedding" and self.model not in EMBEDDING_MODELS and not is_model_name(self.model):
            raise ValueError(f"field 'model' is {self.model!r}; the embedding method needs one of "
                             f"{list(EMBEDDING_MODELS)} or an endpoint model (a model whose vectors the knowledge base "
                             "stores)")
        if self.method == "cross-encoder" and not self.model.strip():
            raise ValueError("field 'model' must name the local directory of a sentence-transformers CrossEncoder")
        return self


class Strategy(BaseModel):
    """One immutable, fully specified retrieval strategy version (fields: docs/design.md §3.2).

    Strict: no str -> number or float -> int coercion and no bools for numbers; ints given for float fields
    become floats. Use :meth:`replace` for a modified copy (``model_copy(update=...)`` would skip validation)."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid", allow_inf_nan=False)

    version: str
    description: str = ""
    embedding_model: str = "use-multilingual-v3"
    text_search: str = "kb"
    vector_candidate_k: int = Field(10, ge=0)
    keyword_candidate_k: int = Field(10, ge=0)
    keyword_scorer: str = "ts_rank_cd"
    bm25_k1: float = Field(0.9, ge=0)
    bm25_b: float = Field(0.4, ge=0, le=1)
    fusion: str = "weighted"
    vector_weight: float = Field(0.7, ge=0)
    keyword_weight: float = Field(0.3, ge=0)
    normalization: str = "none"
    rrf_k: int = Field(60, ge=0)
    final_top_k: int = Field(10, ge=1)
    ef_search: int = Field(100, ge=1, le=MAX_EF_SEARCH)
    complete_pool: bool = False
    rerank: Rerank | None = None
    vector_search: str = "hnsw"
    http: HttpRetriever | None = None

    def __init__(self, version: Any = _UNSET, /, **data: Any) -> None:
        """Validate; ``version`` may also be given positionally. Raises :class:`StrategyError`."""
        if version is not _UNSET:
            if "version" in data:
                raise TypeError("Strategy() got multiple values for 'version'")
            data["version"] = version
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise StrategyError(_describe(data.get("version"), exc)) from None

    @field_validator("version")
    @classmethod
    def _valid_version(cls, value: str) -> str:
        """The shared name rule (:func:`rag_pipeline.storage.names.check_name`)."""
        try:
            return check_name(STRATEGY_VERSION, value)
        except InvalidNameError as exc:
            raise ValueError(f"{show_name(value)} is not a valid strategy version: {exc.reason}; "
                             f"{name_rule(STRATEGY_VERSION)}") from None

    @field_validator(*_CHOICES)
    @classmethod
    def _one_of(cls, value: str, info: ValidationInfo) -> str:
        return _one_of(value, info, _CHOICES)

    @field_validator("embedding_model")
    @classmethod
    def _embedding_model(cls, value: str) -> str:
        return _embedding_model(value)

    @model_validator(mode="after")
    def _consistent(self) -> Strategy:
        """Cross-field rules; a ValueError's text starts with the field it names."""
        if self.http is not None:
            if self.vector_candidate_k or self.keyword_candidate_k or self.rerank or self.complete_pool:
                raise ValueError("field 'http' is a retriever of its own: no leg, rerank or complete_pool with it")
            return self
        if self.vector_candidate_k == 0 and self.keyword_candidate_k == 0:
            raise ValueError("field 'vector_candidate_k' and keyword_candidate_k are both 0 (no leg enabled)")
        enabled_weights = [w for k, w in ((self.vector_candidate_k, self.vector_weight),
                                          (self.keyword_candidate_k, self.keyword_weight)) if k > 0]
        if not any(enabled_weights):
            raise ValueError("field 'vector_weight' and keyword_weight are 0 for every enabled leg")
        if self.fusion == "rrf" and self.normalization != "none":
            raise ValueError("field 'normalization' must be 'none' with fusion 'rrf' (RRF uses ranks only)")
        if self.complete_pool and (self.fusion == "rrf" or self.normalization == "rank"):
            raise ValueError("field 'complete_pool' needs a score-based fusion: a completed score has no leg rank, "
                             "so fusion 'rrf' and normalization 'rank' cannot use it")
        if self.ef_search < self.vector_candidate_k and self.vector_search == "hnsw":
            raise ValueError(f"field 'ef_search' ({self.ef_search}) must be >= vector_candidate_k "
                             f"({self.vector_candidate_k}); HNSW returns at most ef_search rows")
        return self

    def replace(self, **changes: Any) -> Strategy:
        """A validated copy with ``changes`` applied (the former ``dataclasses.replace``)."""
        return type(self)(**{**self.model_dump(), **changes})

    def params(self) -> dict[str, Any]:
        """Every parameter except ``version`` / ``description``, in field order; the optional stages
        (``complete_pool``, ``rerank``) and a non-default ``vector_search`` only when set. An ``http`` strategy: its
        retriever's identity, marked external (no leg of ours: stored runs are read as an imported ranking's)."""
        if self.http is not None:
            return {"external": HTTP_KIND, "http": self.http.identity(), "keyword_candidate_k": 0,
                    "vector_candidate_k": 0}
        return {name: value for name, value in self.model_dump(exclude=set(_IDENTITY_FIELDS)).items()
                if name not in OPTIONAL_FIELDS or value != OPTIONAL_FIELDS[name]}

    def params_hash(self) -> str:
        """SHA-256 hex of the canonical JSON of :meth:`params` (keys sorted, compact separators, floats by
        ``repr``, ints of float fields coerced first); the description does not participate."""
        canonical = json.dumps(self.params(), sort_keys=True, separators=(",", ":"), allow_nan=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


FIELD_NAMES = tuple(Strategy.model_fields)

_PROBLEMS = {
    "missing": "is required",
    "extra_forbidden": f"is not a strategy field; known fields: {list(FIELD_NAMES)}",
    "string_type": "must be a string, got {input!r}",
    "int_type": "must be an integer, got {input!r}",
    "float_type": "must be a number, got {input!r}",
    "bool_type": "must be true or false, got {input!r}",
    "model_type": "must be a mapping of the fields docs/strategies.md lists, got {input!r}",
    "list_type": "must be a list, got {input!r}",
    "finite_number": "must be finite, got {input!r}"}


def _bounds(field: str) -> tuple[Any, Any]:
    """The ``ge`` / ``le`` constraints of a field (None where absent)."""
    model: type[BaseModel] = Strategy
    if field.startswith(("rerank.", "http.")):
        model, field = (Rerank if field.startswith("rerank.") else HttpRetriever), field.split(".", 1)[1]
    metadata = model.model_fields[field].metadata
    return (next((m.ge for m in metadata if hasattr(m, "ge")), None),
            next((m.le for m in metadata if hasattr(m, "le")), None))


def _describe(version: Any, exc: ValidationError) -> str:
    """``strategy 'v': field 'f' <problem>`` for each pydantic error, without pydantic's wording."""
    problems = []
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"]) if error["loc"] else ""
        value = error.get("input")
        if error["type"] == "value_error":  # our validators' own text
            text = str(error["ctx"]["error"])
            if field and text.startswith("field '"):  # a nested model's own rule: field 'rerank.model' ...
                problems.append(f"field '{field}.{text[len(chr(39)) + 6:]}")
            else:
                problems.append(text if not field else f"field {field!r} {text}")
            continue
        if error["type"] == "extra_forbidden" and field.startswith(("rerank.", "http.")):
            nested = Rerank if field.startswith("rerank.") else HttpRetriever
            problems.append(f"field {field!r} is not a {field.split('.')[0]} field; known fields: "
                            f"{list(nested.model_fields)}")
            continue
        if error["type"] in ("greater_than_equal", "less_than_equal"):
            low, high = _bounds(field)
            problem = (f"must be >= {low}, got {value!r}" if high is None
                       else f"must be in [{low}, {high}], got {value!r}")
        else:
            problem = _PROBLEMS.get(error["type"], "is invalid ({msg})").format(input=value, msg=error["msg"])
        problems.append(f"field {field!r} {problem}")
    return f"strategy {version!r}: " + "; ".join(problems)


def strategy_from_mapping(entry: Any, where: str = "") -> Strategy:
    """Build a :class:`Strategy` from one registry entry: missing parameters take the model defaults, unknown keys
    are an error; ``where`` prefixes error messages (e.g. the file and list index)."""
    prefix = f"{where}: " if where else ""
    if not isinstance(entry, Mapping):
        raise StrategyError(f"{prefix}entry must be a mapping, got {type(entry).__name__}")
    if "version" not in entry:
        raise StrategyError(f"{prefix}entry has no 'version' key")
    unknown = sorted(str(key) for key in entry if key not in FIELD_NAMES)
    if unknown:
        raise StrategyError(f"{prefix}strategy {entry['version']!r}: unknown key(s) {unknown}; "
                            f"known keys: {list(FIELD_NAMES)}")
    if "http" in entry:  # no leg of ours
        entry = {"vector_candidate_k": 0, "keyword_candidate_k": 0, **entry}
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
    override = get_settings().strategies_file
    return override if override else PACKAGED_STRATEGIES_FILE


def load_registry(path: str | Path | None = None) -> dict[str, Strategy]:
    """Load and validate the strategy registry; see :func:`registry_path` for the file chosen."""
    resolved = registry_path(path)
    try:  # a FIFO or device is refused, at most 1 MB is read
        data = yaml.safe_load(read_bounded(resolved, MAX_STRATEGIES_FILE_BYTES, what="the file").decode("utf-8"))
    except FileReadError as exc:
        raise StrategyError(f"cannot read strategies file {exc}") from None
    except UnicodeDecodeError as exc:
        raise StrategyError(f"strategies file {printable(resolved)} is not UTF-8 text ({exc.reason} at byte "
                            f"{exc.start})") from None
    except yaml.YAMLError as exc:
        raise StrategyError(f"invalid YAML in strategies file {resolved}: {exc}") from exc
    return parse_registry(data, source=str(resolved))


def get_strategy(version: str, registry: Mapping[str, Strategy] | None = None) -> Strategy:
    """Look up one version (in ``registry``, default :func:`load_registry`)."""
    strategies = load_registry() if registry is None else registry
    try:
        return strategies[version]
    except KeyError:
        raise StrategyError(unknown_strategy_message(version, strategies)) from None


def unknown_strategy_message(version: str, known: Iterable[str]) -> str:
    """``unknown strategy version 'hybird-v1'; did you mean 'hybrid-v1'? (known versions: ...)`` (the closest name by
    :func:`difflib.get_close_matches`; none close: the known versions only)."""
    names = sorted(set(known))
    close = difflib.get_close_matches(str(version), names, n=1, cutoff=0.75)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown strategy version {version!r}{hint} (known versions: {', '.join(names) or 'none'})"


def strategy_entry(strategy: Strategy) -> dict[str, Any]:
    """A registry entry: every field, the optional stages only when set (plain YAML-able values); an ``http``
    strategy: its name, description and retriever."""
    if strategy.http is not None:
        return {"version": strategy.version, "description": strategy.description,
                "http": strategy.http.model_dump(exclude_none=True)}
    entry = {name: getattr(strategy, name) for name in FIELD_NAMES}
    for name, default in OPTIONAL_FIELDS.items():
        if entry[name] == default:
            del entry[name]
    if strategy.rerank is not None:
        entry["rerank"] = strategy.rerank.model_dump()
    return entry


def strategy_to_yaml(strategy: Strategy) -> str:
    """A complete registry entry, indented to paste under the top-level ``strategies:`` key."""
    entry = strategy_entry(strategy)
    text = yaml.safe_dump([entry], sort_keys=False, allow_unicode=True, width=10**9)
    return "".join("  " + line for line in text.splitlines(keepends=True))
