"""The label draft (docs/labelling.md): pooled candidates of several strategies per question (:func:`pool`), judged
by a person, then a dataset file or version (:func:`export_draft`, :func:`store_draft`) after the label check."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa
from pydantic import ValidationError

from rag_pipeline.contracts.labelling import FORMAT, Draft, DraftCandidate, DraftExport, DraftQuestion, LeftOut
from rag_pipeline.evaluation.datasets.label_check import check_labels
from rag_pipeline.evaluation.datasets.load import Dataset, load_dataset, parse_dataset
from rag_pipeline.evaluation.datasets.strict_json import JsonReadError, decode_json, field_path
from rag_pipeline.evaluation.http_runs import catalogue_texts
from rag_pipeline.evaluation.runs.candidate_queries import unjudged_top_k
from rag_pipeline.evaluation.runs.lifecycle import get_run
from rag_pipeline.evaluation.runs.results import load_stored_dataset, store_dataset
from rag_pipeline.evaluation.trec.lines import chunk_key, key_prefix
from rag_pipeline.knowledge_base import attached, catalogue, chunk_lookup
from rag_pipeline.knowledge_base.chunk_lookup import ChunkRow
from rag_pipeline.knowledge_base.embedding import get_embedder
from rag_pipeline.knowledge_base.lifecycle import KnowledgeBaseRef, resolve_knowledge_base
from rag_pipeline.retrieval.attached_search import search_batch
from rag_pipeline.retrieval.http_retriever import Question, rank_all
from rag_pipeline.retrieval.search import hybrid_search_batch
from rag_pipeline.retrieval.strategies import Strategy, StrategyError, get_strategy, load_registry
from rag_pipeline.service.applicability import split_runnable
from rag_pipeline.settings import datasets_dir
from rag_pipeline.storage.files import FileReadError, read_bounded, write_atomic
from rag_pipeline.storage.names import DATASET, KNOWLEDGE_BASE, check_name

MAX_DRAFT_BYTES = 200 * 1024 * 1024
KEY_GRADES = (0, 1, 2, 3)  # the grades the labelling keys give
RRF_K = 60


class DraftError(ValueError):
    """A draft file that cannot be read or is not a valid draft; the message names the file and every problem."""


def pool_order(found_by: dict[str, int]) -> tuple[float, int]:
    """Sort key of a pooled candidate (smaller first): agreement of the strategies, then the best rank."""
    return (-sum(1.0 / (RRF_K + r) for r in found_by.values()), min(found_by.values(), default=10**9))


def load_draft(path: str | Path) -> Draft:
    """Read and validate a draft; :class:`DraftError` lists every problem (``questions[2].candidates[0].grade``)."""
    path = Path(path)
    try:
        raw = read_bounded(path, MAX_DRAFT_BYTES, what="draft")
    except FileReadError as exc:
        raise DraftError(f"cannot read the draft {exc}") from None
    try:
        data = decode_json(raw, MAX_DRAFT_BYTES)
    except JsonReadError as exc:
        raise DraftError(f"invalid draft {path}: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise DraftError(f"invalid draft {path}: not a label draft (a JSON object with \"format\": \"{FORMAT}\", "
                         "as `rag-pipeline suggest` writes)")
    try:
        draft = Draft.model_validate(_plain(data))
    except ValidationError as exc:
        lines = [f"  {field_path(e['loc']) or '(top level)'}: {e['msg']}" for e in exc.errors()[:50]]
        raise DraftError(f"invalid draft {path}:\n" + "\n".join(lines)) from None
    problems = [f"  questions[{i}]: case_id {q.case_id!r} is used twice"
                for i, q in enumerate(draft.questions) if [x.case_id for x in draft.questions].index(q.case_id) != i]
    if draft.position >= len(draft.questions):
        problems.append(f"  position: {draft.position} is past the last question ({len(draft.questions) - 1})")
    if problems:
        raise DraftError(f"invalid draft {path}:\n" + "\n".join(problems))
    return draft


def _plain(value):
    """JSON as plain dicts/lists (the decoder's duplicate-key tracking dicts become dicts)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return [_plain(v) for v in value] if isinstance(value, list) else value


def save_draft(draft: Draft, path: str | Path) -> None:
    """Write the draft atomically (a temporary file renamed over it): a crash never leaves half a draft."""
    write_atomic(Path(path), json.dumps(draft.model_dump(), ensure_ascii=False, indent=1) + "\n")


def export_cases(draft: Draft, *, binary: bool = False) -> tuple[list[dict], list[tuple[str, str]]]:
    """``(dataset cases, [(case_id, why not exported)])`` of a draft."""
    cases, left_out = [], []
    for q in draft.questions:
        if q.status == "skipped":
            left_out.append((q.case_id, "skipped"))
            continue
        relevant = q.relevant()
        judged = {c.chunk_id: c.grade for c in q.candidates if c.grade is not None}
        if not q.answerable:  # unanswerable: exported with no relevant chunk (docs/design.md §12.1)
            if relevant:
                left_out.append((q.case_id, "marked unanswerable but a candidate is judged relevant: judge it 0 "
                                            "or drop \"answerable\": false"))
                continue
            cases.append({"case_id": q.case_id, "question": q.question,
                          "relevant_chunk_ids": [] if binary or not judged else judged, "k": q.k,
                          **q.answer_fields()})
            continue
        if not relevant:
            why = "not judged yet" if q.status == "pending" and all(c.grade is None for c in q.candidates) else \
                "no candidate judged relevant (find its answer with `rag-pipeline chunks --search`)"
            left_out.append((q.case_id, why))
            continue
        if binary or set(judged.values()) == {1}:
            labels: list[str] | dict[str, int] = [c.chunk_id for c in relevant]
        else:
            labels = judged
        cases.append({"case_id": q.case_id, "question": q.question, "relevant_chunk_ids": labels, "k": q.k,
                      **q.answer_fields()})
    return cases, left_out


MAX_QUESTIONS_BYTES = 10 * 1024 * 1024


def questions_from_text(text: str, k: int, source: str = "questions") -> list[DraftQuestion]:
    """One question per line (blank lines and ``#`` comments skipped), case ids ``q-001``, ``q-002``..."""
    questions = [q for q in (line.strip() for line in text.splitlines()) if q and not q.startswith("#")]
    if not questions:
        raise DraftError(f"{source} has no question (one per line; blank lines and # comments are skipped)")
    width = max(3, len(str(len(questions))))
    return [DraftQuestion(case_id=f"q-{i:0{width}d}", question=q, k=k, candidates=[])
            for i, q in enumerate(questions, start=1)]


def _is_json(raw: bytes) -> bool:
    return raw.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] in (b"[", b"{")


def questions_k(engine: sa.Engine, knowledge_base: str, questions: str | Path, k: int | None
                ) -> tuple[int | None, int]:
    """``(k for a text questions file, searchable chunks of the knowledge base)``: ``k`` itself when given, else
    a fifth of the chunks (1..10), so that recall@k is not high whatever the strategy; None for a dataset file
    (its cases keep their own k)."""
    with engine.connect() as conn:
        kb = resolve_knowledge_base(conn, knowledge_base)
        user_kb = attached.load(conn, kb)
        total = (attached.list_chunks(conn, user_kb, limit=1)[1] if user_kb is not None
                 else catalogue.count(conn, kb) if catalogue.is_external(kb)
                 else chunk_lookup.list_chunks(conn, kb.id, limit=1)[1])
    try:
        dataset = _is_json(read_bounded(questions, MAX_QUESTIONS_BYTES, what="questions file"))
    except FileReadError as exc:
        raise DraftError(f"cannot read the questions file {exc}") from None
    return (None if dataset else k or max(1, min(10, total // 5))), total


def read_questions(path: str | Path, knowledge_base: str, k: int) -> list[DraftQuestion]:
    """Questions of a text file, or of a dataset file (its labels kept as prior judgments)."""
    path = Path(path)
    try:
        raw = read_bounded(path, MAX_QUESTIONS_BYTES, what="questions file")
    except FileReadError as exc:
        raise DraftError(f"cannot read the questions file {exc}") from None
    if _is_json(raw):
        dataset = load_dataset(path, knowledge_base=knowledge_base) if path.suffix == ".json" else parse_dataset(
            raw, source=str(path), knowledge_base=knowledge_base)
        return [DraftQuestion(case_id=c.case_id, question=c.question, k=c.k, candidates=[
            _candidate(None, cid, {}, g) for cid, g in c.grades.items()],
            reference_answers=list(c.reference_answers) or None, answerable=c.answerable,
            key_points=list(c.key_points) or None) for c in dataset.cases]
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DraftError(f"questions file {path} is not UTF-8 text (byte offset {exc.start})") from None
    return questions_from_text(text, k, source=f"questions file {path}")


def pool(engine: sa.Engine, knowledge_base: str, asked: list[DraftQuestion], *,
         strategies: Sequence[str] | None = None, depth: int = 10, name: str | None = None) -> Draft:
    """The draft of ``asked``: each question's pooled top-``depth`` candidates, ordered by agreement."""
    if not 1 <= depth <= 1000:
        raise DraftError(f"depth must be between 1 and 1000, got {depth}")
    with engine.begin() as conn:
        kb = resolve_knowledge_base(conn, knowledge_base)
        registry = load_registry()
        runnable, left_out = split_runnable(conn, kb, registry)  # the one rule
        if strategies:
            versions = list(dict.fromkeys(strategies))
            chosen = [get_strategy(v, registry) for v in versions]  # an unknown version: StrategyError
            refused = [left_out[v] for v in versions if v in left_out]
            if refused:
                raise StrategyError("; ".join(refused) + f"; it can run: {', '.join(runnable) or 'none'}")
            left_out = {}
        else:
            versions = runnable
            if not versions:
                raise StrategyError(f"no strategy of the registry can search knowledge base {kb.name!r}: "
                                    + "; ".join(left_out.values()))
            chosen = [registry[v] for v in versions]
        found: list[dict[str, dict[str, int]]] = [{} for _ in asked]
        user_kb = attached.load(conn, kb)
        for strategy in chosen:
            if strategy.http is not None:  # the user's retriever: its top depth, ids as a run stores them
                _pool_http(conn, strategy, kb, asked, depth, found)
                continue
            if user_kb is not None:
                traces = _attached_traces(conn, user_kb, strategy, [q.question for q in asked], depth)
            else:
                traces = hybrid_search_batch(conn, knowledge_base_id=kb.id, queries=[q.question for q in asked],
                                             strategy=strategy, limits=[depth] * len(asked))
            for i, trace in enumerate(traces):
                for c in trace.candidates[:depth]:
                    found[i].setdefault(c.chunk_id, {})[strategy.version] = c.rank
        prior_ids = [c.chunk_id for q in asked for c in q.candidates]
        wanted = [cid for f in found for cid in f] + prior_ids
        details = (attached.chunk_rows(conn, user_kb, wanted) if user_kb is not None
                   else _chunk_details(conn, kb.id, wanted))
    for q, pooled in zip(asked, found, strict=True):
        prior = {c.chunk_id: c.grade for c in q.candidates}
        ordered = sorted(pooled, key=lambda cid: (*pool_order(pooled[cid]), cid))
        ordered += sorted(cid for cid in prior if cid not in pooled)  # labelled, but no strategy found it
        q.candidates = [_candidate(details.get(cid), cid, pooled.get(cid, {}), prior.get(cid)) for cid in ordered]
    return Draft(knowledge_base=kb.name, name=name, strategies=versions, strategies_left_out=left_out, depth=depth,
                 created_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), questions=asked)


def _attached_traces(conn: sa.Connection, user_kb: attached.AttachedKnowledgeBase, strategy: Strategy,
                     questions: list[str], depth: int) -> list:
    """A strategy's pools on an attached knowledge base, chunk ids as runs store them."""
    vectors = get_embedder(strategy.embedding_model).embed(questions) if strategy.vector_candidate_k else None
    with attached.read_only(user_kb) as user:
        traces = search_batch(user, user_kb, questions, strategy, [depth] * len(questions), vectors)
    ids = attached.remember(conn, user_kb.kb, sorted({c.chunk_id for t in traces for c in t.candidates}))
    return [dataclasses.replace(t, candidates=[c._replace(chunk_id=ids[c.chunk_id])
                                               for c in t.candidates]) for t in traces]


def _pool_http(conn: sa.Connection, strategy: Strategy, kb: KnowledgeBaseRef, asked: list[DraftQuestion],
               depth: int, found: list[dict[str, dict[str, int]]]) -> None:
    """The retriever's top ``depth`` of each question; the texts it returns (``texts_path``) are catalogued."""
    assert strategy.http is not None
    prefix = key_prefix(kb.name)
    rankings = rank_all(strategy.http, [Question(q.case_id, q.question, depth) for q in asked])
    catalogue_texts(conn, kb, list(rankings.values()))
    for i, q in enumerate(asked):
        for rank, raw in enumerate(rankings[q.case_id].ids[:depth], start=1):
            found[i].setdefault(str(uuid.UUID(chunk_key(prefix, raw)[0])), {})[strategy.version] = rank


def _chunk_details(conn: sa.Connection, kb_id, wanted: list[str]) -> dict[str, ChunkRow]:
    """The chunks of ``wanted`` in the project's chunk table, else in knowledge base ``kb_id``'s catalogue."""
    details = chunk_lookup.chunks_by_ids(conn, wanted)
    return details | catalogue.chunk_rows(conn, kb_id, [c for c in wanted if c not in details])


def _candidate(row: ChunkRow | None, chunk_id: str, found_by: dict[str, int], grade: int | None) -> DraftCandidate:
    if row is None:  # a prior label that is no chunk at all: shown so the judge can drop it
        return DraftCandidate(chunk_id=chunk_id, document_id="", document_name="(no such chunk)", ordinal=-1,
                              char_start=0, char_end=0, text="", found_by=found_by, grade=grade)
    return DraftCandidate(chunk_id=row.chunk_id, document_id=row.document_id, document_name=row.document_name,
                          ordinal=row.ordinal, char_start=row.char_start, char_end=row.char_end, text=row.text,
                          found_by=found_by, grade=grade)


def _work_in(path: Path) -> str | None:
    """What overwriting an existing ``path`` would lose (a draft's grades, or a file that is no draft), else None."""
    try:
        old = load_draft(path)
    except DraftError:
        return "is not a label draft"
    graded = sum(c.grade is not None for q in old.questions for c in q.candidates)
    decided = sum(q.status != "pending" for q in old.questions)
    if graded or decided:
        return f"is a label draft holding {graded} grades ({decided} questions judged or skipped)"
    return None


def draft_output(output: str | Path, *, force: bool) -> Path:
    """``output`` as a draft's target: not a folder, and an existing file with grades (or that is no draft) is kept
    unless ``force``."""
    output = Path(output)
    if output.is_dir():
        raise OSError(f"--output {output} is a directory; give a file name (e.g. {output / 'draft.json'})")
    lost = None if force or not output.exists() else _work_in(output)
    if lost:
        raise DraftError(f"not written: --output {output} already exists and {lost}; overwriting it would lose "
                         "that (resume it with `rag-pipeline label`): choose another file, or add --force")
    return output


def suggest(engine: sa.Engine, knowledge_base: str, questions: str | Path, output: str | Path, *,
            strategies: Sequence[str] | None = None, depth: int = 10, k: int = 10,
            name: str | None = None, force: bool = False) -> Draft:
    """Pool the candidates of every question and write the draft to ``output`` (nothing written on an error;
    an existing ``output`` with grades, or that is no draft, is kept unless ``force``)."""
    output = draft_output(output, force=force)
    name = name or output.stem.removesuffix(".draft")
    check_name(DATASET, name)
    with engine.connect() as conn:
        kb_name = resolve_knowledge_base(conn, knowledge_base).name  # an unknown KB before the questions
    draft = pool(engine, kb_name, read_questions(questions, kb_name, k), strategies=strategies, depth=depth,
                 name=name)
    save_draft(draft, output)
    return draft


def pool_runs(engine: sa.Engine, run_ids: Sequence[str], *, name: str | None = None) -> Draft:
    """The draft that closes the pooling loop for stored runs, all on one dataset version: every case of that
    version with its labels as prior judgments, plus each chunk a run ranked k or better that the labels do not
    grade (ordered by agreement, as :func:`pool` orders); a case with such a chunk is ``pending``, the others
    ``judged`` already. Its export is the next version of the dataset (``runs rescore`` then scores the runs)."""
    with engine.connect() as conn:
        runs = [get_run(conn, r) for r in dict.fromkeys(run_ids)]
        for r in runs:
            if r.status != "succeeded":
                raise DraftError(f"run {str(r.id)[:8]} is {r.status}: only a succeeded run has pools to judge")
        if len({r.dataset_id for r in runs}) > 1:
            versions = ", ".join(f"{str(r.id)[:8]}: {r.dataset_name} {r.dataset_version[:12]}" for r in runs)
            raise DraftError(f"the runs are on different dataset versions ({versions}): draft from runs of one "
                             "version (`rag-pipeline runs rescore` brings an older run to the latest one)")
        dataset = load_stored_dataset(conn, runs[0].dataset_id)
        strategy_of = {str(r.id): r.strategy_version for r in runs}
        found: dict[str, dict[str, dict[str, int]]] = {}
        for row in unjudged_top_k(conn, list(strategy_of)):
            by = found.setdefault(row.case_id, {}).setdefault(row.chunk_id, {})
            version = strategy_of[row.run_id]
            by[version] = min(row.rank, by.get(version, row.rank))
        details = _chunk_details(conn, runs[0].knowledge_base_id, [cid for f in found.values() for cid in f]
                                 + [cid for c in dataset.cases for cid in c.grades])
    questions = []
    for c in dataset.cases:
        pooled = found.get(c.case_id, {})
        ordered = sorted(pooled, key=lambda cid: (*pool_order(pooled[cid]), cid))
        questions.append(DraftQuestion(
            case_id=c.case_id, question=c.question, k=c.k, status="pending" if pooled else "judged",
            candidates=[_candidate(details.get(cid), cid, pooled[cid], None) for cid in ordered]
            + [_candidate(details.get(cid), cid, {}, g) for cid, g in c.grades.items()],
            reference_answers=list(c.reference_answers) or None, answerable=c.answerable,
            key_points=list(c.key_points) or None))
    first = next((i for i, q in enumerate(questions) if q.status == "pending"), 0)
    return Draft(knowledge_base=runs[0].knowledge_base_name, name=name or dataset.name,
                 strategies=list(dict.fromkeys(strategy_of.values())), depth=max(c.k for c in dataset.cases),
                 created_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), position=first, questions=questions)


def suggest_from_runs(engine: sa.Engine, run_ids: Sequence[str], output: str | Path, *,
                      name: str | None = None, force: bool = False) -> Draft:
    """:func:`pool_runs` written to ``output`` (nothing written on an error; an existing draft with grades is kept
    unless ``force``)."""
    output = draft_output(output, force=force)
    if name is not None:
        check_name(DATASET, name)
    draft = pool_runs(engine, run_ids, name=name)
    save_draft(draft, output)
    return draft


# --- the console's drafts ----------------------------------------------------------------------------------


def draft_path(knowledge_base: str, name: str) -> Path:
    """Where the console keeps draft ``name`` of a knowledge base: ``<datasets>/.drafts/<kb>/<name>.draft.json``."""
    check_name(KNOWLEDGE_BASE, knowledge_base)
    check_name(DATASET, name)
    return datasets_dir() / ".drafts" / knowledge_base / f"{name}.draft.json"


def console_drafts(knowledge_base: str) -> list[str]:
    folder = draft_path(knowledge_base, "x").parent
    return sorted(p.name.removesuffix(".draft.json") for p in folder.glob("*.draft.json")) if folder.is_dir() else []


def create_console_draft(engine: sa.Engine, knowledge_base: str, name: str, questions: str, *,
                         strategies: Sequence[str] | None = None, depth: int = 10, k: int = 10) -> Path:
    path = draft_path(knowledge_base, name)
    draft = pool(engine, knowledge_base, questions_from_text(questions, k), strategies=strategies, depth=depth,
                 name=name)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_draft(draft, path)
    return path


def create_console_draft_from_run(engine: sa.Engine, run_id: str) -> tuple[str, str]:
    """The console's :func:`pool_runs` of one run, kept as draft ``<dataset>-unjudged-<run id prefix>`` (saved as
    a new version of the run's dataset); returns the knowledge base and the draft's name."""
    draft = pool_runs(engine, [run_id])
    name = f"{draft.name}-unjudged-{str(run_id)[:8]}"
    path = draft_path(draft.knowledge_base, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_draft(draft, path)
    return draft.knowledge_base, name


def open_console_draft(knowledge_base: str, name: str) -> Draft:
    path = draft_path(knowledge_base, name)
    if not path.is_file():
        raise DraftError(f"no label draft {name!r} for knowledge base {knowledge_base!r}")
    return load_draft(path)


# --- drafts → datasets ---------------------------------------------------------------------------------------


def _checked(engine: sa.Engine, draft: Draft, name: str, source: str, binary: bool) -> tuple[Dataset, str, DraftExport]:
    """The dataset of a draft's judged questions, its JSON text and the export; :class:`DraftError` if none."""
    cases, left_out = export_cases(draft, binary=binary)
    if not cases:
        raise DraftError(f"no question of the draft has a candidate judged relevant yet ({len(left_out)} left out): "
                         "nothing to export")
    left = [LeftOut(case_id=c, reason=r) for c, r in left_out]
    meta = {"labelled_with": {"strategies": draft.strategies, "depth": draft.depth, "draft_created_at":
                              draft.created_at, "exported_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                              "left_out": [x.model_dump() for x in left]}}
    data = {"knowledge_base": draft.knowledge_base, "cases": cases, "metadata": meta}
    text = json.dumps(data, ensure_ascii=False, indent=1) + "\n"
    dataset = parse_dataset(text, source=source, name=name)  # every rule of a dataset file
    with engine.connect() as conn:
        report = check_labels(conn, dataset.knowledge_base, dataset.cases)
    if report.invalid():
        bad = report.invalid()[0]
        raise DraftError(f"not saved: {report.summary()}; e.g. case {bad.case_id}: {bad.chunk_id} {bad.status} — "
                         f"{bad.detail}")
    exported = {c["case_id"] for c in cases}
    unfinished = [LeftOut(case_id=q.case_id, reason=f"still pending: {sum(c.grade is not None for c in q.candidates)} "
                          f"of {len(q.candidates)} candidates graded, the others count as not relevant")
                  for q in draft.questions if q.status == "pending" and q.case_id in exported]
    return dataset, text, DraftExport(dataset=dataset.name, knowledge_base=dataset.knowledge_base,
                                      cases=len(dataset.cases), labels=report.summary(), left_out=left,
                                      unfinished=unfinished)


def check_export_target(draft: Draft, output: str | Path, *, force: bool = False) -> None:
    """:class:`DraftError` when ``output`` exists and is not an earlier export of ``draft`` (its labels would be
    lost), unless ``force``."""
    output = Path(output)
    if output.is_dir():
        raise OSError(f"--output {output} is a directory; give a file name")
    if force or not output.exists():
        return
    try:
        old = json.loads(read_bounded(output, MAX_DRAFT_BYTES, what="dataset"))
        made = old["metadata"]["labelled_with"]["draft_created_at"]
        cases = f" ({len(old['cases'])} cases)"
    except (FileReadError, ValueError, TypeError, KeyError):
        made, cases = None, ""
    if made != draft.created_at or old.get("knowledge_base") != draft.knowledge_base:
        raise DraftError(f"not written: {output} already exists{cases} and is not an export of this draft; "
                         "overwriting it would lose its labels: choose another file, or add --force")


def export_draft(engine: sa.Engine, draft: Draft, output: str | Path, *, binary: bool = False,
                 force: bool = False) -> DraftExport:
    """Write the judged questions of ``draft`` as a dataset file (validated, labels checked first); an existing
    file is replaced only when it is an earlier export of the draft, or with ``force``."""
    output = Path(output)
    check_export_target(draft, output, force=force)
    _, text, done = _checked(engine, draft, output.stem, str(output), binary)
    write_atomic(output, text, parents=True)
    return done.model_copy(update={"path": str(output)})


def store_draft(engine: sa.Engine, draft: Draft, name: str, *, binary: bool = False) -> DraftExport:
    """Store the judged questions of ``draft`` as a new version of dataset ``name`` (validated, labels checked)."""
    dataset, _, done = _checked(engine, draft, name, f"label draft {draft.name or name}", binary)
    with engine.begin() as conn:
        kb = resolve_knowledge_base(conn, draft.knowledge_base)
        dataset_id = store_dataset(conn, dataset, kb.name)
    return done.model_copy(update={"dataset_id": str(dataset_id)})
