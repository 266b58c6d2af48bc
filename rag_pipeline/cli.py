"""The ``rag-pipeline`` command: a thin layer over ``rag_pipeline.core`` (no Dagster daemon needed).

Every command honours ``RAG_DATABASE_URL`` (any PostgreSQL with pgvector) and ``RAG_PGDATA`` (the
embedded server's data dir). User errors print one line ``rag-pipeline: error: ...`` and exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from rag_pipeline import cli_diagnose, cli_eval, cli_tune
from rag_pipeline.cli_errors import guarded
from rag_pipeline.storage import embedded_server as embedded_pg
from rag_pipeline.storage.engine import DatabaseError, dagster_database_url, database_url, get_engine
from rag_pipeline.knowledge_base.embedding import DEFAULT_MODEL, EMBEDDING_MODELS, EmbeddingError
from rag_pipeline.knowledge_base.lifecycle import KnowledgeBaseError, knowledge_base_stats, set_document_state
from rag_pipeline.settings import mask_url, pgdata_dir, project_root
from rag_pipeline.knowledge_base.sources import SourceError, read_folder
from rag_pipeline.knowledge_base.textsearch import TEXT_SEARCH_MODES, TextSearchError

USER_ERRORS: tuple[type[BaseException], ...] = (
    DatabaseError, EmbeddingError, KnowledgeBaseError, SourceError, TextSearchError, FileNotFoundError,
)


def _progress_bar():
    from tqdm import tqdm  # noqa: PLC0415

    bars: dict[str, tqdm] = {}

    def progress(stage: str, done: int, total: int) -> None:
        bar = bars.get(stage) or bars.setdefault(stage, tqdm(total=total, desc=stage, unit="chunk", file=sys.stderr))
        bar.update(done - bar.n)
        if done >= total:
            bar.close()

    return progress


def _print(obj) -> None:
    print(json.dumps(obj, indent=2, ensure_ascii=False, default=str))


def cmd_db(args: argparse.Namespace) -> int:
    if args.action == "stop":
        print("stopped" if embedded_pg.stop() else f"not running ({pgdata_dir()})")
        return 0
    if args.action == "url":
        print(mask_url(database_url()) if not args.dagster else mask_url(dagster_database_url()))
        return 0
    if args.action == "status":
        external = os.environ.get("RAG_DATABASE_URL")
        print(f"RAG_DATABASE_URL {mask_url(external)}" if external else
              f"embedded {'running' if embedded_pg.is_running() else 'stopped'} in {pgdata_dir()}")
        return 0
    # start: server, databases, migrations, and the .env Dagster reads from the repo root
    get_engine()
    env_file = project_root() / ".env"
    lines = [f"DAGSTER_HOME={project_root()}", f"RAG_DAGSTER_PG_URL={dagster_database_url()}"]
    if os.environ.get("RAG_PGDATA"):
        lines.append(f"RAG_PGDATA={pgdata_dir()}")
    env_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    env_file.chmod(0o600)  # it may hold a database password (RAG_DATABASE_URL with one)
    _prepare_dagster_instance(lines)
    print(f"database ready: {mask_url(database_url())}\nwrote {env_file} (DAGSTER_HOME, RAG_DAGSTER_PG_URL)")
    return 0


def _prepare_dagster_instance(env_lines: list[str]) -> None:
    """Create the ``rag_db`` concurrency pool in Dagster's storage once (see defs.evaluation.ensure_pool)."""
    for line in env_lines:
        key, _, value = line.partition("=")
        os.environ.setdefault(key, value)
    import dagster as dg  # noqa: PLC0415 - only here: the other db commands stay fast

    from rag_pipeline.defs.evaluation import ensure_pool  # noqa: PLC0415

    with dg.DagsterInstance.get() as instance:
        ensure_pool(instance)


def cmd_ingest(args: argparse.Namespace) -> int:
    from rag_pipeline.knowledge_base.ingestion import ingest_documents  # noqa: PLC0415

    docs = read_folder(args.path)
    result = ingest_documents(
        get_engine(), docs, args.knowledge_base, text_search=args.text_search,
        chunk_size=args.chunk_size or None, chunk_overlap=args.chunk_overlap, models=args.models,
        progress=_progress_bar(),
    )
    _print(result.as_dict())
    return 0


def cmd_import_beir(args: argparse.Namespace) -> int:
    from rag_pipeline.knowledge_base.beir import import_beir  # noqa: PLC0415

    result, dataset = import_beir(
        get_engine(), args.path, args.knowledge_base, split=args.split, models=args.models,
        text_search=args.text_search, k=args.k, progress=_progress_bar(),
    )
    out = Path(args.dataset_out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(dataset, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    _print({**result.as_dict(), "dataset_out": str(out), "cases": len(dataset["cases"])})
    return 0


def cmd_kb(args: argparse.Namespace) -> int:
    with get_engine().connect() as conn:
        _print(knowledge_base_stats(conn, args.knowledge_base))
    return 0


def cmd_doc(args: argparse.Namespace) -> int:
    deleted = {"delete": True, "undelete": False}.get(args.deleted) if args.deleted else None
    with get_engine().begin() as conn:
        n = set_document_state(conn, args.knowledge_base, args.document, status=args.status,
                               publication_status=args.publication, is_deleted=deleted)
    print(f"updated {n} document(s)")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from rag_pipeline.demo_run import run_demo  # noqa: PLC0415 - imports Dagster

    return run_demo(strategies=args.strategy or None, out_dir=Path(args.output_dir) if args.output_dir else None)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rag-pipeline", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("db", help="embedded PostgreSQL: start (and write .env), stop, status, url")
    p.add_argument("action", choices=["start", "stop", "status", "url"])
    p.add_argument("--dagster", action="store_true", help="with url: print Dagster's storage URL")
    p.set_defaults(func=cmd_db)

    def kb_options(p: argparse.ArgumentParser, text_search: str) -> None:
        p.add_argument("--knowledge-base", required=True, help="knowledge base name (created if new)")
        p.add_argument("--text-search", default=text_search, choices=TEXT_SEARCH_MODES,
                       help=f"keyword text mode of a new knowledge base (default {text_search})")
        p.add_argument("--models", nargs="+", default=[DEFAULT_MODEL], choices=EMBEDDING_MODELS,
                       help=f"embedding models to store (default {DEFAULT_MODEL})")

    p = sub.add_parser("ingest", help="ingest a folder of .md/.txt/.html/.jsonl documents into a knowledge base")
    p.add_argument("path")
    kb_options(p, "simple")
    p.add_argument("--chunk-size", type=int, default=500, help="characters per chunk; 0 = one chunk per document")
    p.add_argument("--chunk-overlap", type=int, default=80, help="characters repeated between chunks")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("import-beir", help="import a BEIR folder as a knowledge base + evaluation dataset")
    p.add_argument("path")
    kb_options(p, "english")
    p.add_argument("--dataset-out", required=True, help="where to write the dataset JSON")
    p.add_argument("--split", default="test")
    p.add_argument("--k", type=int, default=10, help="k of every case (default 10)")
    p.set_defaults(func=cmd_import_beir)

    p = sub.add_parser("kb", help="show a knowledge base's counts")
    p.add_argument("knowledge_base")
    p.set_defaults(func=cmd_kb)

    p = sub.add_parser("doc", help="mark a document ready/processing/failed, published/unpublished, deleted")
    p.add_argument("document", help="document original name or id")
    p.add_argument("--knowledge-base", required=True)
    p.add_argument("--status", choices=["READY", "PROCESSING", "FAILED"])
    p.add_argument("--publication", choices=["PUBLISHED", "UNPUBLISHED", "DRAFT"])
    p.add_argument("--deleted", choices=["delete", "undelete"])
    p.set_defaults(func=cmd_doc)
    p = sub.add_parser("demo", help="the main job: ingest the demo KB, evaluate every strategy through Dagster, "
                                    "compare them, write reports/ (make run)")
    p.add_argument("--strategy", action="append", help="only these strategy versions (repeatable; default all)")
    p.add_argument("--output-dir", help="where the JSON reports go (default reports/)")
    p.set_defaults(func=cmd_demo)
    cli_eval.register(sub)
    cli_diagnose.register(sub)
    cli_tune.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return guarded(*USER_ERRORS)(args.func)(args)  # the subcommand modules guard their own commands too


if __name__ == "__main__":
    sys.exit(main())
