"""What a Celery worker needs before it takes runs (deploy/celery/README.md): the database of RAG_DATABASE_URL at
the package's migration head, and every model and cross-encoder folder the registry's strategies use. A worker
missing any of them refuses to start, naming it, rather than failing runs later."""

from __future__ import annotations

from pathlib import Path

from rag_pipeline.knowledge_base.embedding import MINILM_EXTRA
from rag_pipeline.retrieval.strategies import load_registry
from rag_pipeline.service.environment import check_database, check_model
from rag_pipeline.settings import get_settings
from rag_pipeline.storage.files import write_atomic

CONFIG = "dagster.yaml"


def config_text() -> str:
    """The worker deployment's ``dagster.yaml`` shipped with the package (deploy/celery/dagster.yaml)."""
    return Path(__file__).with_name(CONFIG).read_text(encoding="utf-8")


def write_config(folder: str | Path) -> Path:
    """Write the shipped ``dagster.yaml`` into ``folder`` (a DAGSTER_HOME; made if missing); its path."""
    path = Path(folder).expanduser() / CONFIG
    write_atomic(path, config_text(), parents=True)
    return path


def problems() -> tuple[list[str], list[str]]:
    """(what is missing, one line per problem; what was checked and is fine)."""
    if not get_settings().database_url:
        return ["RAG_DATABASE_URL is not set: a worker uses the db machine's PostgreSQL, never a local one"], []
    missing: list[str] = []
    ok: list[str] = []
    for check in check_database():
        (ok if check.status == "OK" else missing).append(
            f"{check.name}: {check.detail}" + (f" ({check.fix})" if check.fix and check.status != "OK" else ""))
    strategies = load_registry().values()
    needs: dict[str, list[str]] = {}
    for strategy in strategies:
        if strategy.vector_candidate_k:
            needs.setdefault(strategy.embedding_model, []).append(strategy.version)
        if strategy.rerank and strategy.rerank.method == "embedding":
            needs.setdefault(strategy.rerank.model, []).append(strategy.version)
        elif strategy.rerank and not Path(strategy.rerank.model).expanduser().is_dir():
            missing.append(f"strategy {strategy.version}: its cross-encoder folder {strategy.rerank.model} is not "
                           "on this machine (copy it to the same path on every worker)")
    for model, users in sorted(needs.items()):
        check = check_model(model)
        line = f"model {model} (strategies {', '.join(sorted(set(users)))}): {check.detail}"
        if check.status != "OK" and check.fix and MINILM_EXTRA not in check.detail:
            line += f" — {check.fix}"
        (ok if check.status == "OK" else missing).append(line)
    return missing, ok + [f"{len(strategies)} strategies"]
