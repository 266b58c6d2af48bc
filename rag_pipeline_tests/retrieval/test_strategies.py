"""Tests for rag_pipeline.retrieval.strategies: packaged registry, hashing, validation, YAML."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from rag_pipeline.retrieval.strategies import (
    FIELD_NAMES,
    OPTIONAL_FIELDS,
    PACKAGED_STRATEGIES_FILE,
    Strategy,
    StrategyError,
    get_strategy,
    load_registry,
    parse_registry,
    strategy_to_yaml,
)

PACKAGED_VERSIONS = {
    "hybrid-v1", "vector-v1", "keyword-v1", "bm25-v1", "hybrid-bm25-v1", "rrf-v1",
    "vector-minilm-v1", "hybrid-bm25-minilm-v1", "hybrid-bm25-rerank-minilm-v1",
    "vector-exact-v1", "hybrid-bm25-exact-v1", "vector-minilm-exact-v1", "hybrid-bm25-minilm-exact-v1",
    "hybrid-bm25-rerank-minilm-exact-v1",
}
# sha256 of the canonical JSON of the seed parameters; stored runs refer to it.
SEED_PARAMS_HASH = "102c63fbd95eeec2368bd0a7ab7f6bccb41e79d929476a8a3284625a62243b05"

# A different valid value for every parameter of the seed strategy.
ALTERNATIVES = {
    "embedding_model": "all-minilm-l6-v2", "text_search": "english",
    "vector_candidate_k": 20, "keyword_candidate_k": 0, "keyword_scorer": "bm25",
    "bm25_k1": 1.2, "bm25_b": 0.75, "fusion": "rrf", "vector_weight": 0.5,
    "keyword_weight": 0.5, "normalization": "minmax", "rrf_k": 10, "final_top_k": 5,
    "ef_search": 40, "complete_pool": True,
    "rerank": {"method": "embedding", "model": "all-minilm-l6-v2"},
    "vector_search": "exact",
}


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "strategies.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_packaged_registry_versions() -> None:
    registry = load_registry()
    assert set(registry) == PACKAGED_VERSIONS
    seed = registry["hybrid-v1"]
    assert seed.params() == Strategy(version="x").params()
    assert seed.params_hash() == SEED_PARAMS_HASH
    assert len({s.params_hash() for s in registry.values()}) == len(registry)


def test_packaged_registry_contents() -> None:
    r = load_registry()
    assert (r["vector-v1"].keyword_candidate_k, r["vector-v1"].vector_weight,
            r["vector-v1"].keyword_weight) == (0, 1.0, 0.0)
    assert r["keyword-v1"].vector_candidate_k == 0
    assert r["keyword-v1"].keyword_scorer == "ts_rank_cd"
    bm25 = r["bm25-v1"]
    assert (bm25.keyword_scorer, bm25.bm25_k1, bm25.bm25_b, bm25.keyword_candidate_k,
            bm25.vector_candidate_k) == ("bm25", 0.9, 0.4, 100, 0)
    hybrid = r["hybrid-bm25-v1"]
    assert (hybrid.normalization, hybrid.vector_weight, hybrid.keyword_weight) == ("minmax", 0.3, 0.7)
    assert (r["rrf-v1"].fusion, r["rrf-v1"].rrf_k) == ("rrf", 60)
    assert r["vector-minilm-v1"].embedding_model == "all-minilm-l6-v2"
    minilm = r["hybrid-bm25-minilm-v1"]
    assert (minilm.embedding_model, minilm.vector_weight, minilm.keyword_weight,
            minilm.normalization) == ("all-minilm-l6-v2", 0.5, 0.5, "minmax")
    assert all(s.text_search == "kb" for s in r.values())
    rerank = r["hybrid-bm25-rerank-minilm-v1"]  # weights chosen on SciFact train (bench/RESULTS.md)
    assert (rerank.embedding_model, rerank.complete_pool, rerank.normalization, rerank.vector_weight) == \
        ("use-multilingual-v3", True, "zscore", 0.3)
    assert rerank.rerank.model_dump() == {"method": "embedding", "model": "all-minilm-l6-v2", "top_n": None,
                                          "weight": 0.6, "normalization": "zscore", "batch_size": 32}
    assert all(s.rerank is None and not s.complete_pool for v, s in r.items()
               if v not in (rerank.version, "hybrid-bm25-rerank-minilm-exact-v1"))
    for name in ("hybrid-bm25-v1", "rrf-v1", "vector-minilm-v1", "hybrid-bm25-minilm-v1"):
        assert r[name].vector_candidate_k == 100


def test_packaged_entries_list_every_field() -> None:
    """No packaged version may depend on a code default that could later change."""
    raw = yaml.safe_load(PACKAGED_STRATEGIES_FILE.read_text(encoding="utf-8"))
    base = tuple(name for name in FIELD_NAMES if name not in OPTIONAL_FIELDS)
    for entry in raw["strategies"]:
        assert tuple(entry)[:len(base)] == base, entry["version"]
        assert tuple(entry)[len(base):] == tuple(name for name in OPTIONAL_FIELDS if name in entry)


def test_params_hash_definition_and_stability() -> None:
    seed = Strategy(version="hybrid-v1")
    canonical = json.dumps(seed.params(), sort_keys=True, separators=(",", ":"))
    assert seed.params_hash() == hashlib.sha256(canonical.encode()).hexdigest()
    assert Strategy(version="other").params_hash() == seed.params_hash()
    assert Strategy(version="a", vector_weight=1, keyword_weight=0).params_hash() == \
        Strategy(version="a", vector_weight=1.0, keyword_weight=0.0).params_hash()
    assert "version" not in seed.params() and "description" not in seed.params()


@pytest.mark.parametrize("field", sorted(ALTERNATIVES))
def test_params_hash_changes_with_every_parameter(field: str) -> None:
    # the http kind is a retriever of its own (no leg): its identity is checked in test_http_strategy.py
    assert set(ALTERNATIVES) == set(FIELD_NAMES) - {"version", "description", "http"}
    seed = Strategy(version="hybrid-v1")
    changed = seed.replace(**{field: ALTERNATIVES[field]})
    assert changed.params_hash() != seed.params_hash()


def test_description_does_not_change_hash() -> None:
    seed = Strategy(version="hybrid-v1")
    assert seed.replace(description="new words").params_hash() == seed.params_hash()


@pytest.mark.parametrize("changes, field", [
    ({"fusion": "max"}, "fusion"),
    ({"normalization": "l2"}, "normalization"),
    ({"embedding_model": "bert base"}, "embedding_model"),  # no model name (an endpoint model's may be any)
    ({"embedding_model": "-bert"}, "embedding_model"),
    ({"text_search": "german"}, "text_search"),
    ({"keyword_scorer": "tfidf"}, "keyword_scorer"),
    ({"vector_candidate_k": -1}, "vector_candidate_k"),
    ({"keyword_candidate_k": 2.5}, "keyword_candidate_k"),
    ({"vector_candidate_k": 0, "keyword_candidate_k": 0}, "vector_candidate_k"),
    ({"vector_weight": -0.1}, "vector_weight"),
    ({"vector_weight": 0.0, "keyword_weight": 0.0}, "vector_weight"),
    ({"keyword_candidate_k": 0, "vector_weight": 0.0}, "vector_weight"),
    ({"keyword_weight": float("nan")}, "keyword_weight"),
    ({"keyword_weight": True}, "keyword_weight"),
    ({"bm25_b": 1.5}, "bm25_b"),
    ({"bm25_k1": -1.0}, "bm25_k1"),
    ({"fusion": "rrf", "normalization": "minmax"}, "normalization"),
    ({"rrf_k": -5}, "rrf_k"),
    ({"final_top_k": 0}, "final_top_k"),
    ({"ef_search": 0}, "ef_search"),
    ({"vector_candidate_k": 200}, "ef_search"),
    ({"description": 3}, "description"),
])
def test_bad_field_names_version_and_field(changes: dict, field: str) -> None:
    with pytest.raises(StrategyError, match=rf"strategy 'bad-v1': field '{field}'"):
        Strategy(version="bad-v1", **changes)


def test_an_endpoint_model_is_named_by_any_model_name() -> None:
    """Whether it is registered is known only to the database: checked when the strategy runs."""
    strategy = Strategy(version="ep-v1", embedding_model="my-tei.bge_small-en", rerank={**RERANK, "model": "my-tei"})
    assert strategy.embedding_model == "my-tei.bge_small-en"
    assert strategy.params()["embedding_model"] == "my-tei.bge_small-en"


def test_bad_version_name() -> None:
    with pytest.raises(StrategyError, match="field 'version'"):
        Strategy(version="has space")


def test_get_strategy_unknown_lists_known_versions() -> None:
    assert get_strategy("bm25-v1").keyword_scorer == "bm25"
    with pytest.raises(StrategyError, match="'nope-v9'.*bm25-v1.*hybrid-v1"):
        get_strategy("nope-v9")


def test_unknown_key_names_key_and_version(tmp_path: Path) -> None:
    path = _write(tmp_path, "strategies:\n  - version: odd-v1\n    top_k: 5\n")
    with pytest.raises(StrategyError, match=r"strategy 'odd-v1': unknown key\(s\) \['top_k'\]"):
        load_registry(path)


def test_registry_file_errors(tmp_path: Path) -> None:
    bad_field = "strategies:\n  - version: odd-v1\n    fusion: max\n"
    with pytest.raises(StrategyError, match=r"strategies\[0\]: strategy 'odd-v1': field 'fusion'"):
        load_registry(_write(tmp_path, bad_field))
    duplicate = "strategies:\n  - version: a-v1\n  - version: a-v1\n"
    with pytest.raises(StrategyError, match="duplicate strategy version 'a-v1'"):
        load_registry(_write(tmp_path, duplicate))
    with pytest.raises(StrategyError, match="no 'version'"):
        parse_registry({"strategies": [{"fusion": "rrf"}]})
    with pytest.raises(StrategyError, match=r"unknown top-level key\(s\) \['extra'\]"):
        parse_registry({"strategies": [{"version": "a"}], "extra": 1})
    with pytest.raises(StrategyError, match="non-empty list"):
        parse_registry({"strategies": []})
    with pytest.raises(StrategyError, match="cannot read"):
        load_registry(tmp_path / "missing.yaml")
    with pytest.raises(StrategyError, match="invalid YAML"):
        load_registry(_write(tmp_path, "strategies: [\n"))


def test_env_var_overrides_packaged_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, "strategies:\n  - version: only-v1\n")
    monkeypatch.setenv("RAG_STRATEGIES_FILE", str(path))
    assert list(load_registry()) == ["only-v1"]
    assert get_strategy("only-v1") == Strategy(version="only-v1")
    assert set(load_registry(PACKAGED_STRATEGIES_FILE)) == PACKAGED_VERSIONS


def test_strategy_to_yaml_round_trips(tmp_path: Path) -> None:
    odd = Strategy(version="odd-v1", description="quotes ' \" colon: yes, 中文 # not a comment",
                   vector_weight=1, keyword_weight=0.25, normalization="dbsf")
    strategies = [*load_registry().values(), odd]
    text = "strategies:\n" + "".join(strategy_to_yaml(s) for s in strategies)
    loaded = load_registry(_write(tmp_path, text))
    assert list(loaded.values()) == strategies
    assert [s.params_hash() for s in loaded.values()] == [s.params_hash() for s in strategies]


RERANK = {"method": "embedding", "model": "all-minilm-l6-v2"}


@pytest.mark.parametrize("changes, field, problem", [
    ({"rerank": {**RERANK, "method": "colbert"}}, "rerank.method", "expected one of"),
    ({"rerank": {**RERANK, "model": "bge/small"}}, "rerank.model", "the embedding method needs one of"),
    ({"rerank": {"method": "cross-encoder", "model": "  "}}, "rerank.model", "must name the local directory"),
    ({"rerank": {**RERANK, "weight": 1.5}}, "rerank.weight", r"must be in \[0, 1\], got 1.5"),
    ({"rerank": {**RERANK, "top_n": 0}}, "rerank.top_n", "must be >= 1"),
    ({"rerank": {**RERANK, "normalization": "rank"}}, "rerank.normalization", "expected one of"),
    ({"rerank": {**RERANK, "batch_size": "8"}}, "rerank.batch_size", "must be an integer"),
    ({"rerank": {**RERANK, "depth": 3}}, "rerank.depth", "is not a rerank field"),
    ({"rerank": {"model": "all-minilm-l6-v2"}}, "rerank.method", "is required"),
    ({"rerank": "minilm"}, "rerank", "must be a mapping"),
    ({"complete_pool": "yes"}, "complete_pool", "must be true or false"),
    ({"complete_pool": True, "fusion": "rrf"}, "complete_pool", "needs a score-based fusion"),
    ({"complete_pool": True, "normalization": "rank"}, "complete_pool", "needs a score-based fusion"),
])
def test_bad_stage_config_names_strategy_and_field(changes: dict, field: str, problem: str) -> None:
    with pytest.raises(StrategyError, match=rf"strategy 'bad-v1': field '{field}' .*{problem}|"
                                            rf"strategy 'bad-v1': field '{field}' {problem}"):
        Strategy(version="bad-v1", **changes)


def test_bad_rerank_in_a_registry_file_names_file_entry_and_field(tmp_path: Path) -> None:
    path = _write(tmp_path, "strategies:\n  - version: r-v1\n    rerank:\n      method: embedding\n"
                            "      model: all-minilm-l6-v2\n      weight: -1\n")
    with pytest.raises(StrategyError, match=r"strategies\[0\]: strategy 'r-v1': field 'rerank.weight' must be in"):
        load_registry(path)


def test_optional_stages_leave_every_other_hash_alone_and_round_trip(tmp_path: Path) -> None:
    plain = Strategy(version="p")
    assert "rerank" not in plain.params() and "complete_pool" not in plain.params()
    assert plain.replace(complete_pool=False, rerank=None).params_hash() == plain.params_hash()
    staged = plain.replace(version="s", complete_pool=True, normalization="minmax", rerank={**RERANK, "weight": 0.6})
    assert staged.params()["rerank"] == {**RERANK, "top_n": None, "weight": 0.6, "normalization": "minmax",
                                         "batch_size": 32}
    text = "strategies:\n" + strategy_to_yaml(plain) + strategy_to_yaml(staged)
    assert "rerank" not in strategy_to_yaml(plain) and "complete_pool" not in strategy_to_yaml(plain)
    loaded = load_registry(_write(tmp_path, text))
    assert loaded["p"] == plain and loaded["p"].params_hash() == plain.params_hash()
    assert loaded["s"] == staged and loaded["s"].params_hash() == staged.params_hash() != plain.params_hash()


def test_exact_versions_are_their_hnsw_versions_with_exact_vector_search() -> None:
    r = load_registry()
    exact = {v: s for v, s in r.items() if s.vector_search == "exact"}
    assert len(exact) == 5
    for version, strategy in exact.items():
        hnsw = r[version.replace("-exact-v1", "-v1")]
        assert hnsw.vector_search == "hnsw" and "vector_search" not in hnsw.params(), "old hashes unchanged"
        assert strategy.params() == {**hnsw.params(), "vector_search": "exact"}, version
    with pytest.raises(StrategyError, match="field 'vector_search' is 'ivf'; expected one of"):
        Strategy(version="x", vector_search="ivf")
    with pytest.raises(StrategyError, match="field 'ef_search'"):
        Strategy(version="x", vector_candidate_k=200, ef_search=100)
    assert Strategy(version="x", vector_candidate_k=2000, ef_search=100, vector_search="exact").ef_search == 100
