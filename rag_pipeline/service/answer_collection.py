"""Collect a dataset's answers into an answers file, from a RAG endpoint or an in-process answerer: the operation
behind ``rag-pipeline answers collect`` and ``POST /datasets/{name}/answers/collect`` (docs/answers-collection.md).
Every input is checked before the file is touched; the API's collection is guarded and bounded."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from pathlib import Path

from rag_pipeline.answers.collection.answerers import Answerer, get_answerer
from rag_pipeline.answers.collection.answers_writer import AnswersWriter, output_lock, read_existing
from rag_pipeline.answers.collection.collector import collect_from_answerer, collect_from_endpoint
from rag_pipeline.answers.collection.endpoint_client import EndpointClient
from rag_pipeline.contracts.answers import CollectionProgress, CollectionResult, EndpointConfig
from rag_pipeline.contracts.errors import BadInputError
from rag_pipeline.evaluation.datasets.load import Dataset, EvaluationCase, load_dataset
from rag_pipeline.evaluation.datasets.resolve import dataset_file
from rag_pipeline.settings import project_root
from rag_pipeline.storage.engine import get_engine
from rag_pipeline.storage.files import check_writable
from rag_pipeline.storage.http.guard import EndpointGuard

API_REPLY_BYTES = 2 * 1024 * 1024
"""Over the HTTP API a reply longer than this is not parsed (the CLI's cap is 8 MB)."""


class CollectionConfigError(BadInputError, ValueError):
    """``collect_answers`` called with neither or both of an endpoint and an answerer, or a bad output."""




def collect_answers(dataset: str | Path | Dataset, output: str | Path, *, endpoint: EndpointConfig | None = None,
                    answerer: str | Answerer | None = None, knowledge_base: str | None = None,
                    strategy: str | None = None, progress: Callable[[CollectionProgress], None] | None = None,
                    environ: dict[str, str] | None = None, guard: EndpointGuard | None = None,
                    cancel: threading.Event | None = None) -> CollectionResult:
    """Collect the answers of ``dataset`` into ``output`` (JSON Lines, resumed if it exists) from exactly one of
    ``endpoint`` and ``answerer``. ``environ``: where ``env:`` header values are read (default: the process's);
    ``guard``: the HTTP API's collection (allowed endpoints only); ``cancel`` set stops it (lines written kept)."""
    if (endpoint is None) == (answerer is None):
        raise CollectionConfigError("give exactly one of --endpoint URL and --answerer NAME")
    output = Path(output)
    loaded = dataset if isinstance(dataset, Dataset) else load_dataset(dataset_file(dataset),
                                                                       knowledge_base=knowledge_base)
    cases = loaded.cases
    check_writable(output, example="answers.jsonl")
    client = None
    if endpoint is not None:
        client = (EndpointClient(endpoint, environ) if guard is None else EndpointClient(
            endpoint, environ, guard=guard, max_response_bytes=API_REPLY_BYTES, quote_replies=False))
    chosen = (get_answerer(answerer, engine=get_engine(), knowledge_base=loaded.knowledge_base, strategy=strategy)
              if isinstance(answerer, str) else answerer)
    identity = chosen.identity if chosen is not None else None
    with output_lock(output):  # from before the file is read to the end: a second collector is refused at once
        return _collect(output, cases, client, chosen, identity, progress, cancel)


def _collect(output: Path, cases: tuple[EvaluationCase, ...], client: EndpointClient | None, chosen: Answerer | None,
             identity: str | None, progress: Callable[[CollectionProgress], None] | None,
             cancel: threading.Event | None) -> CollectionResult:
    state = read_existing(output, {c.case_id for c in cases}, identity)
    pending = [c for c in cases if c.case_id not in state.kept]
    total, skipped = len(cases), len(cases) - len(pending)
    if not pending:
        if state.dropped_torn:  # rewrite without it
            AnswersWriter(output, state).close()
        return CollectionResult(output=str(output), total=total, answered=0, errors=0, skipped_existing=skipped,
                                status="succeeded", answerer=identity)
    with AnswersWriter(output, state) as writer:
        if client is not None:
            return collect_from_endpoint(client, pending, writer, total=total, skipped=skipped, progress=progress,
                                         cancel=cancel)
        assert chosen is not None, "collect_answers takes an endpoint or an answerer"
        return collect_from_answerer(chosen, pending, writer, total=total, skipped=skipped, progress=progress,
                                     cancel=cancel)


def api_collection_file(dataset: Dataset, endpoint: EndpointConfig | None, answerer: str | None,
                        strategy: str | None) -> Path:
    """The answers file of an API collection: one per dataset version and endpoint or answerer (resumable)."""
    what = {"knowledge_base": dataset.knowledge_base, "dataset": dataset.name, "version": dataset.content_hash,
            "endpoint": endpoint.model_dump(mode="json") if endpoint is not None else None,
            "answerer": answerer, "strategy": strategy}
    key = hashlib.sha256(json.dumps(what, sort_keys=True).encode("utf-8")).hexdigest()[:32]
    return project_root() / ".rag_pipeline" / "api-collections" / f"{key}.jsonl"
