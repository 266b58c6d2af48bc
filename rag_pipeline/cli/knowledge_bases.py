"""``rag-pipeline ingest | import-beir | kb | doc``: build knowledge bases and manage their documents."""

from __future__ import annotations

import argparse

from rag_pipeline.cli import arguments
from rag_pipeline.cli.errors import guarded
from rag_pipeline.cli.output import print_json, print_warnings, stage_progress
from rag_pipeline.knowledge_base.embedding import DEFAULT_MODEL, EMBEDDING_MODELS, MODEL_NAME_RULE, is_model_name
from rag_pipeline.knowledge_base.lifecycle import (
    DOCUMENT_STATUSES,
    PUBLICATION_STATUSES,
    KnowledgeBaseError,
    resolve_knowledge_base,
    set_document_state,
)
from rag_pipeline.knowledge_base.textsearch import TEXT_SEARCH_MODES
from rag_pipeline.service import knowledge_bases as service
from rag_pipeline.storage.engine import get_engine


@guarded()
def cmd_ingest(args: argparse.Namespace) -> int:
    result = service.ingest(get_engine(), args.path, args.knowledge_base, text_search=args.text_search,
                            chunk_size=args.chunk_size, chunk_overlap=args.chunk_overlap, models=args.models,
                            rechunk=args.rechunk, progress=stage_progress())
    print_warnings(result.warnings)
    print_json(result.model_dump())
    return 0


@guarded()
def cmd_import_beir(args: argparse.Namespace) -> int:
    result = service.import_beir(get_engine(), args.path, args.knowledge_base, args.dataset_out, split=args.split,
                                 models=args.models, text_search=args.text_search, k=args.k,
                                 progress=stage_progress())
    print_warnings(result.warnings)
    print_json(result.model_dump())
    return 0


@guarded()
def cmd_kb(args: argparse.Namespace) -> int:
    if args.knowledge_base == "attach" and args.name:
        from rag_pipeline.knowledge_base import attached  # noqa: PLC0415

        if not args.url_env:
            raise attached.AttachError("kb attach: --url-env VAR is required (the variable holding the URL)")
        result = attached.attach(get_engine(), args.name, args.url_env, attached.read_mapping(args.mapping))
        print_warnings(result.warnings)
        print_json(result.model_dump(mode="json"))
        return 0
    if args.knowledge_base == "catalogue" and args.name:
        from rag_pipeline.knowledge_base import catalogue  # noqa: PLC0415

        if not args.corpus or args.url_env or args.mapping:
            raise catalogue.CatalogueError("kb catalogue: give --corpus FILE (and optionally --format beir|jsonl), "
                                           "not --url-env or --mapping")
        print_json(catalogue.catalogue(get_engine(), args.name, args.corpus, args.format).model_dump())
        return 0
    if args.name or args.url_env or args.mapping or args.corpus or args.format:
        raise KnowledgeBaseError("only `kb attach NAME --url-env VAR [--mapping FILE]` and `kb catalogue NAME --corpus "
                                 "FILE [--format beir|jsonl]` take a name and options")
    engine = get_engine()
    with engine.connect() as conn:
        kb = resolve_knowledge_base(conn, args.knowledge_base)
    if kb.kind == "attached":  # its counts live in the user's database
        from rag_pipeline.knowledge_base import attached  # noqa: PLC0415

        result = attached.describe(engine, kb)
        print_warnings(result.warnings)
        print_json(result.model_dump(mode="json"))
        return 0
    print_json(service.knowledge_base_stats(get_engine(), args.knowledge_base).model_dump())
    return 0


@guarded()
def cmd_doc(args: argparse.Namespace) -> int:
    deleted = {"delete": True, "undelete": False}.get(args.deleted) if args.deleted else None
    with get_engine().begin() as conn:
        n = set_document_state(conn, args.knowledge_base, args.document, status=args.status,
                               publication_status=args.publication, is_deleted=deleted)
    print(f"updated {n} document(s)")
    return 0


def _kb_options(p: argparse.ArgumentParser, text_search: str) -> None:
    p.add_argument("--knowledge-base", required=True, help="knowledge base name (created if new)")
    p.add_argument("--text-search", default=text_search, choices=TEXT_SEARCH_MODES,
                   help=f"keyword text mode of a new knowledge base (default {text_search})")
    p.add_argument("--models", nargs="+", default=[DEFAULT_MODEL], type=_model_name, metavar="MODEL",
                   help=f"embedding models to store (default {DEFAULT_MODEL}): {', '.join(EMBEDDING_MODELS)} or an "
                        "endpoint model (rag-pipeline embeddings list)")


def _model_name(text: str) -> str:
    if not is_model_name(text):
        raise argparse.ArgumentTypeError(f"{text[:120]!r} is no embedding model name ({MODEL_NAME_RULE})")
    return text


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ingest")
    p.add_argument("path")
    _kb_options(p, "simple")
    p.add_argument("--chunk-size", type=arguments.CHUNK_CHARS, default=service.DEFAULT_CHUNK_SIZE,
                   help="characters per chunk; 0 = one chunk per document")
    p.add_argument("--chunk-overlap", type=arguments.CHUNK_CHARS, default=service.DEFAULT_CHUNK_OVERLAP,
                   help="characters repeated between chunks")
    p.add_argument("--rechunk", action="store_true",
                   help="an existing knowledge base with another chunk size/overlap is re-chunked in place; its "
                        "replaced chunks stay (is_current = false) so `rag-pipeline fix-labels` can re-map labels")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("import-beir",
        description="Import a BEIR folder (corpus.jsonl, queries.jsonl, qrels) as a knowledge base "
                    "(one chunk per document) and a dataset file. Documents without text, and queries "
                    "without text or without a relevant document left, are skipped and listed in the "
                    "output and in the file's metadata. Graded qrels (more than one positive grade) "
                    "give {chunk_id: grade} labels.")
    p.add_argument("path")
    _kb_options(p, "english")
    p.add_argument("--dataset-out", required=True, help="where to write the dataset JSON")
    p.add_argument("--split", default="test")
    p.add_argument("--k", type=arguments.K, default=10, help="k of every case (1..1000, default 10)")
    p.set_defaults(func=cmd_import_beir)

    p = sub.add_parser("kb", description="`kb NAME`: a knowledge base's counts and content version. `kb attach NAME "
                       "--url-env VAR [--mapping FILE]`: attach your own PostgreSQL tables as a knowledge base, "
                       "searched read-only. `kb catalogue NAME --corpus FILE [--format beir|jsonl]`: load your "
                       "system's documents (their ids and text) as the chunk catalogue of knowledge base NAME "
                       "(created of kind external when new; re-running replaces the catalogue with the file's "
                       "documents), for labelling and the label check of an HTTP retriever's or a TREC run file's "
                       "ids (docs/evaluating.md, \"Your own retriever\").")
    p.add_argument("knowledge_base", help="a knowledge base, or `attach` / `catalogue`")
    p.add_argument("name", nargs="?", help="with `attach` / `catalogue`: the knowledge base's name")
    p.add_argument("--url-env", help="with `attach`: the environment variable holding the database URL (the URL "
                                     "and its password are never stored or printed)")
    p.add_argument("--mapping", help="with `attach`: a YAML/JSON file naming the table and columns (default: the "
                                     "original design's documents / document_chunks)")
    p.add_argument("--corpus", metavar="FILE",
                   help="with `catalogue`: a BEIR corpus.jsonl (_id, title, text) or id/text JSON Lines (id, text, "
                        "optional title); ids are strings or integers, any text")
    p.add_argument("--format", choices=("beir", "jsonl"),
                   help="with `catalogue`: the corpus file's format (default: detected from its first line)")
    p.set_defaults(func=cmd_kb)

    p = sub.add_parser("doc")
    p.add_argument("document", help="document original name or id")
    p.add_argument("--knowledge-base", required=True)
    p.add_argument("--status", choices=DOCUMENT_STATUSES)
    p.add_argument("--publication", choices=PUBLICATION_STATUSES)
    p.add_argument("--deleted", choices=["delete", "undelete"])
    p.set_defaults(func=cmd_doc)
