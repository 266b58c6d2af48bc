"""Adding a strategy to a registry file, safely: validated before it replaces the file, comments kept."""

from __future__ import annotations

from pathlib import Path

import yaml

from rag_pipeline.retrieval import strategies
from rag_pipeline.retrieval.http_strategy import TEXT_PATH_FIELDS
from rag_pipeline.storage.files import write_atomic


class RegistryConflictError(strategies.StrategyError):
    """The registry file already defines the version with other parameters."""


def write_strategy(path: str | Path, strategy: strategies.Strategy, comment: str = "") -> str:
    """Append ``strategy`` to the registry file ``path``; returns ``"appended"`` or ``"unchanged"``.

    A missing file starts as a copy of the active registry; the result is validated before it atomically replaces the
    file (text appended, comments kept, unless the layout forces a plain YAML rewrite). The version already defined
    with other parameters is a :class:`RegistryConflictError`."""
    target = Path(path)
    source = target if target.exists() else strategies.registry_path()
    text = source.read_text(encoding="utf-8")
    registry = strategies.load_registry(source)
    existing = registry.get(strategy.version)
    if existing is not None:
        if existing.params_hash() == strategy.params_hash():
            old, new = (tuple(getattr(s.http, f, None) for f in TEXT_PATH_FIELDS) for s in (existing, strategy))
            if old != new:  # not part of the identity, yet what the strategy reads
                raise RegistryConflictError(
                    f"{target} already defines strategy {strategy.version!r} with the same ranking but texts_path / "
                    f"titles_path {old[0]!r} / {old[1]!r}; edit that entry of the file (the paths of the texts are "
                    "not part of the identity)")
            if source != target:
                target.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(target, text)
            return "unchanged"
        raise RegistryConflictError(f"{target} already defines strategy {strategy.version!r} with other parameters; "
                        "choose a new name with --version")
    note = "".join(f"  # {line}\n" for line in comment.splitlines() if line.strip())
    new_text = text.rstrip("\n") + "\n\n" + note + strategies.strategy_to_yaml(strategy)
    expected = {**{v: s.params_hash() for v, s in registry.items()}, strategy.version: strategy.params_hash()}
    if _registry_hashes(new_text, str(target)) != expected:
        data = yaml.safe_load(text)
        data["strategies"].append(strategies.strategy_entry(strategy))
        new_text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=10**9)
        if _registry_hashes(new_text, str(target)) != expected:  # pragma: no cover - defensive
            raise strategies.StrategyError(f"could not add {strategy.version!r} to {target} as a valid registry")
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, new_text)
    return "appended"


def _registry_hashes(text: str, source: str) -> dict[str, str] | None:
    try:
        return {v: s.params_hash() for v, s in strategies.parse_registry(yaml.safe_load(text), source).items()}
    except (yaml.YAMLError, strategies.StrategyError):
        return None
