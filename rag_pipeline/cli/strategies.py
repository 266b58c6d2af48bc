"""``rag-pipeline strategy add-http``: add a strategy of kind ``http`` (the user's retriever, asked over HTTP) to a
registry file (docs/strategies.md "HTTP retrievers"). Only the command line adds one: the HTTP API never names a
URL the server connects to."""

from __future__ import annotations

import argparse
from pathlib import Path

from rag_pipeline.cli import arguments
from rag_pipeline.cli.errors import guarded
from rag_pipeline.retrieval.http_strategy import DEFAULT_RETRIEVER_TEMPLATE, STAGES, TEXT_PATH_FIELDS
from rag_pipeline.retrieval.registry_file import write_strategy
from rag_pipeline.retrieval.strategies import Strategy, StrategyError
from rag_pipeline.settings import get_settings
from rag_pipeline.storage.http.request import ResolvedHeaders
from rag_pipeline.storage.http.scrubbing import redact_url
from rag_pipeline.storage.names import printable

OPTIONAL_PATHS = tuple(f"{s}_{w}_path" for s in STAGES for w in ("scores", "ranks"))


@guarded()
def cmd_add_http(args: argparse.Namespace) -> int:
    http = {"url": args.url, "method": args.method, "request_template": args.request_template,
            "ids_path": args.ids_path, "scores_path": args.scores_path, "pool_size": args.pool_size,
            "headers": list(args.headers or []), "concurrency": args.concurrency, "timeout_s": args.timeout,
            "retries": args.retries, "backoff_s": args.backoff, "max_wait_s": args.max_wait,
            **{name: getattr(args, name) for name in (*OPTIONAL_PATHS, *TEXT_PATH_FIELDS)
               if getattr(args, name) is not None}}
    strategy = Strategy(args.version, description=args.description, vector_candidate_k=0, keyword_candidate_k=0,
                        http=http)
    assert strategy.http is not None
    ResolvedHeaders(strategy.http.headers, url=strategy.http.url)  # every env: variable set now, values unread
    target = Path(args.registry) if args.registry else get_settings().strategies_file
    if target is None:  # the packaged registry belongs to the installation
        raise StrategyError("give --registry FILE (or set RAG_STRATEGIES_FILE): the packaged registry is not written; "
                            "a new file starts as a copy of it")
    what = write_strategy(target, strategy, f"an HTTP retriever at {redact_url(strategy.http.url)}")
    print(f"{what}: strategy {printable(strategy.version)} (kind http, identity {strategy.params_hash()[:12]}) "
          f"in {printable(target)}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``strategy add-http`` to the ``rag-pipeline`` sub-commands."""
    group = sub.add_parser("strategy").add_subparsers(
        dest="strategy_command", required=True)
    p = group.add_parser("add-http", help="add a strategy of kind http: your retriever, asked over HTTP per case")
    p.add_argument("version", help="the new strategy version (a name, e.g. my-retriever-v1)")
    p.add_argument("--url", required=True, help="the retriever's URL; {question} {case_id} {k} {pool_size} may "
                                                "stand in its path or query (no credentials: use --header)")
    p.add_argument("--method", choices=["POST", "GET"], default="POST")
    p.add_argument("--request-template", default=DEFAULT_RETRIEVER_TEMPLATE,
                   help=f"the JSON body; its strings' {{question}} {{case_id}} {{k}} {{pool_size}} are filled "
                        f"(default {DEFAULT_RETRIEVER_TEMPLATE})")
    p.add_argument("--ids-path", required=True, help="where the reply holds the ranked ids, best first "
                                                     "(e.g. hits[*].id)")
    p.add_argument("--scores-path", required=True, help="where it holds their scores (e.g. hits[*].score)")
    for name in OPTIONAL_PATHS:
        p.add_argument("--" + name.replace("_", "-"), help="optional: " + name.replace("_", " ")[:-5])
    p.add_argument("--texts-path", help="optional: where the reply holds the returned chunks' texts, as many as "
                                        "ids (e.g. hits[*].text); stored in the knowledge base's chunk catalogue "
                                        "for labelling and show --include-text; not part of the identity")
    p.add_argument("--titles-path", help="optional, with --texts-path: where it holds their titles (strings or null)")
    p.add_argument("--header", action="append", dest="headers", metavar="'NAME: env:VARIABLE'",
                   help="a request header whose value is read from the environment when the strategy runs "
                        "(repeatable; only the variable's name is stored)")
    number = arguments.int_between
    seconds = arguments.finite_float
    p.add_argument("--pool-size", type=number(1, 10_000), default=100, help="candidates to ask for (default 100)")
    p.add_argument("--concurrency", type=number(1, 256), default=4, help="requests at once (default 4)")
    p.add_argument("--timeout", type=seconds(0.0, 3600.0, exclusive=True), default=30.0,
                   help="seconds per request (default 30)")
    p.add_argument("--retries", type=number(0, 20), default=3,
                   help="retries of a 429, 5xx, timeout or connection error (default 3; Retry-After honoured)")
    p.add_argument("--backoff", type=seconds(0.0, 600.0), default=0.5,
                   help="first wait before a retry in seconds, doubled each time (default 0.5)")
    p.add_argument("--max-wait", type=seconds(0.0, 3600.0), default=30.0,
                   help="longest wait before a retry in seconds (default 30)")
    p.add_argument("--description", default="", help="what it is")
    p.add_argument("--registry", help="the registry file to add it to (default: RAG_STRATEGIES_FILE; the packaged "
                                      "registry is never written: give --registry or set RAG_STRATEGIES_FILE)")
    p.set_defaults(func=cmd_add_http)
