"""``rag-pipeline embeddings list | add-endpoint``: the embedding models, and a model served by an OpenAI-compatible
``/v1/embeddings`` endpoint (docs/cli.md "Embedding models"). Only the command line adds one: the HTTP API never
names a URL the server connects to. A header's value is read from the environment when the model is used; only
the variable's name is stored, and no value is ever printed."""

from __future__ import annotations

import argparse

from rag_pipeline.cli import arguments
from rag_pipeline.cli.errors import guarded
from rag_pipeline.cli.output import print_json
from rag_pipeline.storage.names import printable


@guarded()
def cmd_add_endpoint(args: argparse.Namespace) -> int:
    from pydantic import ValidationError  # noqa: PLC0415 - the command's own imports, after the parse

    from rag_pipeline.knowledge_base.embedding import EmbeddingError, check_model_name  # noqa: PLC0415
    from rag_pipeline.knowledge_base.embedding_models import add_endpoint_model, check_endpoint_model  # noqa: PLC0415
    from rag_pipeline.knowledge_base.endpoint_embedding import EmbeddingEndpoint, endpoint_embedder  # noqa: PLC0415
    from rag_pipeline.storage.engine import get_engine  # noqa: PLC0415

    name = check_model_name(args.name)
    values = {"url": args.url, "model_id": args.model, "headers": [_header(h) for h in args.headers or []],
              "batch_size": args.batch_size, "concurrency": args.concurrency, "timeout_s": args.timeout,
              "retries": args.retries, "backoff_s": args.backoff, "max_wait_s": args.max_wait}
    try:
        endpoint = EmbeddingEndpoint(**values)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        flag = {"model_id": "--model", "headers": "--header", "timeout_s": "--timeout", "backoff_s": "--backoff",
                "max_wait_s": "--max-wait"}.get(str(first["loc"][0]), "--" + field.replace("_", "-"))
        raise EmbeddingError(f"embedding model {name!r}: {flag}{field[len(str(first['loc'][0])):]} "
                             f"{first['msg'].removeprefix('Value error, ')}") from None
    engine = get_engine()
    check_endpoint_model(engine, name, args.dimension, endpoint)  # a conflict before anything is asked
    endpoint.resolved_headers(name)  # every env: variable set now (values read, never shown)
    if not args.no_check:  # one text embedded: the endpoint answers, with vectors of the dimension given
        endpoint_embedder(name, args.dimension, endpoint).embed(["rag-pipeline embeddings add-endpoint check"])
    what = add_endpoint_model(engine, name, args.dimension, endpoint)
    print(f"{what}: embedding model {printable(name)} (kind endpoint, {args.dimension}-d, model "
          f"{printable(endpoint.model_id)} at {endpoint.host()})")
    return 0


def _header(spec: str) -> str:
    """``NAME=env:VARIABLE`` written as ``NAME: env:VARIABLE`` (a header name holds neither ``=`` nor ``:``)."""
    name, sep, value = spec.partition("=")
    return f"{name.strip()}: {value.strip()}" if sep and ":" not in name else spec


@guarded()
def cmd_list(args: argparse.Namespace) -> int:
    from rag_pipeline.analysis.text_table import text_table  # noqa: PLC0415
    from rag_pipeline.knowledge_base.embedding_models import list_models  # noqa: PLC0415
    from rag_pipeline.storage.engine import get_engine  # noqa: PLC0415

    models = list_models(get_engine())
    if args.format == "json":
        print_json([m.model_dump() for m in models])
        return 0
    rows = [[m.name, m.kind, str(m.dimension), m.model_id or m.backend, m.url or "-",
             ", ".join(m.headers) or "-"] for m in models]
    print(text_table(["model", "kind", "dimension", "served as", "url", "headers"],
                     [[printable(cell) for cell in row] for row in rows]))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``embeddings list`` and ``embeddings add-endpoint`` to the ``rag-pipeline`` sub-commands."""
    group = sub.add_parser("embeddings").add_subparsers(dest="embeddings_command", required=True)
    p = group.add_parser("list", help="the shipped embedding models and the endpoint models")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(func=cmd_list)

    p = group.add_parser(
        "add-endpoint", help="add an embedding model served by an OpenAI-compatible /v1/embeddings endpoint",
        description="Add (or re-point) an embedding model whose vectors come from an OpenAI-compatible "
                    "/v1/embeddings endpoint (text-embeddings-inference, vLLM, Ollama, llama.cpp's server). It is "
                    "then a model like the shipped ones: `ingest --models NAME`, a strategy's embedding_model. "
                    "Its model id and dimension never change once added (the vectors stored under the name were "
                    "made by them); the URL, headers, batch size and timeouts may be changed by adding it again.")
    p.add_argument("name", help="the model's name here (letters, digits, '.', '_', '-'), e.g. tei-bge-small")
    p.add_argument("--url", required=True, help="the endpoint's whole URL, e.g. http://127.0.0.1:8080/v1/embeddings "
                                                "(no credentials: use --header)")
    p.add_argument("--model", required=True, help="the model's name on the server (the request's \"model\")")
    p.add_argument("--dimension", required=True, type=arguments.int_between(1, 16_000),
                   help="the vectors' dimension (checked on every reply)")
    p.add_argument("--header", action="append", dest="headers", metavar="'NAME: env:VARIABLE'",
                   help="a request header whose value is read from the environment when the model is used "
                        "(repeatable; only the variable's name is stored), e.g. 'Authorization: env:TEI_TOKEN' "
                        "(or 'Authorization=env:TEI_TOKEN') with TEI_TOKEN='Bearer …'")
    number = arguments.int_between
    seconds = arguments.finite_float
    p.add_argument("--batch-size", type=number(1, 2048), default=32, help="texts per request (default 32)")
    p.add_argument("--concurrency", type=number(1, 64), default=4, help="requests at once (default 4)")
    p.add_argument("--timeout", type=seconds(0.0, 3600.0, exclusive=True), default=60.0,
                   help="seconds per request (default 60)")
    p.add_argument("--retries", type=number(0, 20), default=3,
                   help="retries of a 429, 5xx, timeout or connection error (default 3; Retry-After honoured)")
    p.add_argument("--backoff", type=seconds(0.0, 600.0), default=0.5,
                   help="first wait before a retry in seconds, doubled each time (default 0.5)")
    p.add_argument("--max-wait", type=seconds(0.0, 3600.0), default=30.0,
                   help="longest wait before a retry in seconds (default 30)")
    p.add_argument("--no-check", action="store_true",
                   help="do not embed one text first to check that the endpoint answers with vectors of "
                        "--dimension (e.g. when it is not up yet)")
    p.set_defaults(func=cmd_add_endpoint)
