"""``rag-pipeline chunks | suggest | label | fix-labels``: build and keep a dataset (docs/labelling.md)."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from rag_pipeline.cli import arguments, label_terminal
from rag_pipeline.cli.errors import guarded
from rag_pipeline.cli.output import print_json
from rag_pipeline.contracts.catalog import ChunkList
from rag_pipeline.contracts.labelling import LabelFixes
from rag_pipeline.knowledge_base.chunk_lookup import snippet
from rag_pipeline.service.labelling import chunks as chunk_search
from rag_pipeline.service.labelling import drafts
from rag_pipeline.service.labelling import fixes as label_fixes
from rag_pipeline.service.labelling.drafts import DraftError, load_draft
from rag_pipeline.settings import datasets_dir
from rag_pipeline.storage.engine import get_engine
from rag_pipeline.storage.names import printable

LIMIT = arguments.int_between(1, chunk_search.MAX_LIMIT)
DEPTH = arguments.int_between(1, 1000)


def chunk_table(listing: ChunkList, width: int) -> str:
    """One line per chunk: rank, chunk id, document #ordinal, span, how it matched, snippet."""
    if not listing.chunks:
        scope = f" of document {listing.document!r}" if listing.document else ""
        return (f"no chunk{scope} matches {listing.search!r}" if listing.search
                else f"knowledge base {listing.knowledge_base!r} has no searchable chunk{scope}")
    lines = []
    for c in listing.chunks:
        head = (f"{c.rank:3d}  {c.chunk_id}  {printable(c.document_name)} #{c.ordinal}  "
                f"{c.char_start}-{c.char_end}" + (f"  [{'+'.join(c.matched)}]" if c.matched else ""))
        room = max(40, width - 6)
        lines += [head, "     " + printable(snippet(c.text, [listing.search or ""], room))]
    shown = len(listing.chunks)
    more = f" (first {shown}; --limit shows more)" if listing.total > shown else ""
    what = "found" if listing.search else "searchable chunks"
    lines.append(f"{listing.total} {what}{more}")
    return "\n".join(lines)


@guarded()
def cmd_chunks(args: argparse.Namespace) -> int:
    listing = chunk_search.find_chunks(get_engine(), args.knowledge_base, search=args.search, document=args.document,
                                    limit=args.limit)
    if args.format == "json":
        print_json(listing.model_dump())
    else:
        print(chunk_table(listing, shutil.get_terminal_size((120, 30)).columns))
    return 0


def shown_path(path: Path) -> str:
    """``path`` relative to the current folder when it is inside it, else absolute."""
    path = path.resolve()
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


@guarded(DraftError)
def cmd_suggest(args: argparse.Namespace) -> int:
    if args.from_runs:
        if args.questions or args.strategies:
            raise DraftError("--from-run drafts the unjudged top-k chunks of stored runs: it takes no --questions "
                             "or --strategy")
        return _suggest_from_runs(args)
    if not args.questions or not args.knowledge_base:
        raise DraftError("suggest needs --knowledge-base and --questions (or --from-run RUN)")
    engine = get_engine()
    k, searchable = drafts.questions_k(engine, args.knowledge_base, args.questions, args.k)
    draft = drafts.suggest(engine, args.knowledge_base, args.questions, args.output, strategies=args.strategies,
                           depth=args.depth, k=k or 10, name=args.name, force=args.force)
    sizes = [len(q.candidates) for q in draft.questions]
    print(f"wrote {args.output}: {len(draft.questions)} questions, {sum(sizes)} pooled candidates "
          f"({min(sizes)}-{max(sizes)} per question) from {', '.join(draft.strategies)} at depth {draft.depth}")
    if k is None:
        print(f"k of the cases: the dataset's ({', '.join(map(str, sorted({q.k for q in draft.questions})))})")
    elif args.k is None:
        print(f"k of the cases: {k} (a fifth of the knowledge base's {searchable} searchable chunks, at most 10; "
              "--k sets it)")
    elif 3 * k >= searchable:
        print(f"note: k = {k} is a third or more of the knowledge base's {searchable} searchable chunks: recall@k "
              "will be high whatever the strategy", file=sys.stderr)
    for version, reason in draft.strategies_left_out.items():
        print(f"  not pooled: {version}: {reason}", file=sys.stderr)
    target = shown_path(datasets_dir() / f"{draft.name}.json")
    print(f"next: rag-pipeline label {args.output} --output {target}  (the folder Dagster's "
          "new_dataset_sensor watches)")
    return 0


def _suggest_from_runs(args: argparse.Namespace) -> int:
    draft = drafts.suggest_from_runs(get_engine(), args.from_runs, args.output, name=args.name,
                                    force=args.force)
    todo = [q for q in draft.questions if q.status == "pending"]
    chunks = sum(c.grade is None for q in todo for c in q.candidates)
    print(f"wrote {args.output}: {chunks} unjudged top-k chunk(s) to judge in {len(todo)} of {len(draft.questions)} "
          f"cases of dataset {draft.name} (runs of {', '.join(draft.strategies)}); the other cases keep their labels")
    if todo:
        print(f"next: rag-pipeline label {args.output} --output datasets/{draft.name}.json, then "
              f"rag-pipeline runs rescore RUN --dataset datasets/{draft.name}.json")
    return 0


@guarded(DraftError)
def cmd_label(args: argparse.Namespace) -> int:
    path = Path(args.draft)
    draft = load_draft(path)
    target = args.export or args.output
    if target and Path(target).resolve() == path.resolve():
        raise OSError(f"{target} is the draft itself; write the dataset to another file")
    if target:
        drafts.check_export_target(draft, target, force=args.force)  # before the session, not after it
    if not args.export:
        draft = label_terminal.run(draft, path).draft
        p = draft.progress()
        print(f"saved {path}: {p['judged']} judged, {p['skipped']} skipped, {p['pending']} pending "
              f"(`rag-pipeline label {path}` resumes)")
        if not target:
            return 0
    done = drafts.export_draft(get_engine(), draft, target, binary=args.binary, force=args.force)
    print(f"wrote {done.path}: {done.cases} cases; {done.labels}")
    for left in done.left_out:
        print(f"  not exported: {printable(left.case_id)}: {left.reason}", file=sys.stderr)
    for left in done.unfinished:
        print(f"  exported, {printable(left.case_id)}: {left.reason}", file=sys.stderr)
    return 0


@guarded()
def cmd_fix_labels(args: argparse.Namespace) -> int:
    fixes = label_fixes.fix_labels(get_engine(), args.dataset, args.knowledge_base, args.output)
    if args.format == "json":
        print(json.dumps(fixes.model_dump(exclude_unset=True), ensure_ascii=False, indent=2))
    else:
        print(format_fixes(fixes))
    return 1 if fixes.unresolved else 0


def format_fixes(fixes: LabelFixes) -> str:
    c = fixes.counts
    lines = [f"wrote {fixes.output}: {c.labels} labels (every judged chunk, grade 0 included) against "
             f"{fixes.knowledge_base!r}: {c.ok} already valid, "
             f"{c.fixed} fixed, {c.unresolved} left for a person"]
    for ch in fixes.changes:
        lines.append(f"  fixed  case {printable(ch.case_id)}: {ch.old_chunk_id} -> "
                     f"{', '.join(ch.new_chunk_ids)}\n         {printable(ch.reason)}")
    for u in fixes.unresolved:
        lines.append(f"  LISTED case {printable(u.case_id)}: {u.old_chunk_id} ({u.status}): {printable(u.reason)}")
        for cand in u.candidates or []:
            overlap = f" overlap {cand.overlap:.0%}" if cand.overlap is not None else ""
            span = f" chars {cand.char_start}-{cand.char_end}" if cand.char_start is not None else ""
            lines.append(f"           candidate {cand.chunk_id}{span}{overlap}")
    if fixes.unresolved:
        lines.append(f"the listed labels are unchanged in {fixes.output}: replace them by hand (find ids with "
                     "`rag-pipeline chunks --search`), then `rag-pipeline check-dataset`")
    return "\n".join(lines)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("chunks",
        description="List a knowledge base's searchable chunks (document, ordinal, char span, text "
                    "snippet), or search them: chunks containing the text literally first, then the "
                    "knowledge base's keyword search (BM25, its text mode) and a vector search fused "
                    "by reciprocal rank. Chinese works.")
    p.add_argument("--knowledge-base", required=True, help="knowledge base name or id")
    p.add_argument("--search", help="text to look for (a phrase, words, a question)")
    p.add_argument("--document", help="only this document (original name or id)")
    p.add_argument("--limit", type=LIMIT, default=20, help=f"at most this many chunks (1..{chunk_search.MAX_LIMIT}, "
                                                           "default 20)")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.set_defaults(func=cmd_chunks)

    p = sub.add_parser("suggest")
    p.add_argument("--knowledge-base", help="knowledge base name or id (not with --from-run)")
    p.add_argument("--questions", help="a text file (one question per line, # comments) or a dataset file (its "
                                       "labels become prior judgments)")
    p.add_argument("--from-run", action="append", dest="from_runs", metavar="RUN",
                   help="instead of --questions: draft exactly the unjudged top-k chunks of this stored run "
                        "(repeatable; the runs must share one dataset version), every case of that version kept "
                        "with its labels (docs/labelling.md)")
    p.add_argument("--strategy", action="append", dest="strategies", metavar="VERSION",
                   help="strategy version, repeatable (default: every registry version the knowledge base can run)")
    p.add_argument("--depth", type=DEPTH, default=10, help="top candidates taken from each strategy (default 10)")
    p.add_argument("--k", type=arguments.K, help="k of the cases of a text questions file (default: a fifth of the "
                                                 "knowledge base's searchable chunks, 1..10)")
    p.add_argument("--name", help="name of the dataset the draft becomes (default: the draft's file stem)")
    p.add_argument("--output", required=True, help="the draft JSON to write")
    p.add_argument("--force", action="store_true", help="overwrite --output even if it is a draft holding grades "
                                                        "(or not a draft)")
    p.set_defaults(func=cmd_suggest)

    p = sub.add_parser("label", description=label_terminal.__doc__.split("\n\n", 1)[1],
                       formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("draft", help="the draft written by `rag-pipeline suggest`")
    p.add_argument("--output", help="after quitting, write the judged questions as this dataset file")
    p.add_argument("--export", metavar="DATASET", help="no terminal: write the dataset file and exit")
    p.add_argument("--binary", action="store_true", help="export relevant ids as a list (grades dropped)")
    p.add_argument("--force", action="store_true", help="overwrite the dataset file even if it is not an earlier "
                                                        "export of this draft")
    p.set_defaults(func=cmd_label)

    p = sub.add_parser("fix-labels", description=label_fixes.__doc__.split("\n\n", 1)[1],
                       formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dataset", required=True, help="dataset JSON file")
    p.add_argument("--knowledge-base", required=True, help="the knowledge base the labels must point into")
    p.add_argument("--output", required=True, help="the fixed dataset file to write")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(func=cmd_fix_labels)
