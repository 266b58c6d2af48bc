"""``make run`` / ``rag-pipeline demo`` — the main job end to end, through real Dagster runs on the configured instance.

Run as ``python -m rag_pipeline.defs.demo`` (the CLI starts it in a child process); summary: :func:`demo_summary`."""

import argparse
import os
import sys
import time
from pathlib import Path

import dagster as dg

from rag_pipeline.analysis.text_table import text_table
from rag_pipeline.contracts.answers import VERDICTS, AnswerRun
from rag_pipeline.defs.instance import ensure_pool
from rag_pipeline.defs.partitions import answer_partition_key
from rag_pipeline.evaluation.datasets.demo import DEMO_CHUNK_OVERLAP, DEMO_CHUNK_SIZE, DEMO_KB, DEMO_TEXT_SEARCH
from rag_pipeline.knowledge_base.embedding import EMBEDDING_MODELS
from rag_pipeline.knowledge_base.lifecycle import KnowledgeBaseError, resolve_knowledge_base
from rag_pipeline.retrieval.strategies import load_registry
from rag_pipeline.service import analysis, evaluations
from rag_pipeline.service.analysis import StrategyComparison, render_plain
from rag_pipeline.service.answers import list_answer_runs
from rag_pipeline.service.datasets import register_dataset
from rag_pipeline.settings import datasets_dir, load_env_file, project_root, reports_dir
from rag_pipeline.storage.engine import dagster_database_url, get_engine
from rag_pipeline.storage.files import atomic_output


def _load_env_file() -> None:
    """What the ``dagster`` command does for us: read ``.env`` of the repo root (written by ``db start``)."""
    load_env_file(project_root())
    os.environ.setdefault("DAGSTER_HOME", str(project_root()))
    os.environ.setdefault("RAG_DAGSTER_PG_URL", dagster_database_url())


DEMO_ANSWERER = "extractive-v1"
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}  # progress lines come from _step


def _step(message: str) -> float:
    print(f"==> {message}", file=sys.stderr, flush=True)
    return time.perf_counter()


def demo_text_search() -> str:
    """:data:`DEMO_TEXT_SEARCH`, or the text mode an existing demo knowledge base was built in (a mode never changes
    in place), saying how to re-create it."""
    with get_engine().connect() as conn:
        try:
            mode = resolve_knowledge_base(conn, DEMO_KB).text_search
        except KnowledgeBaseError:
            return DEMO_TEXT_SEARCH
    if mode != DEMO_TEXT_SEARCH:
        print(f"    note: the demo knowledge base was built in text mode {mode!r} by an earlier version; it is kept: "
              f"`make clean-db` (it removes the whole local database) then `make run` re-creates it in "
              f"{DEMO_TEXT_SEARCH!r}", file=sys.stderr)
    return mode


def run_demo(strategies: list[str] | None = None, out_dir: Path | None = None, dataset: str = "demo") -> int:
    """Run the demo; 0, or 2 when a strategy's Dagster run failed (a failed gate does not fail it)."""
    _load_env_file()
    from rag_pipeline.definitions import defs  # noqa: PLC0415 - after the environment is set

    strategies = strategies or list(load_registry())
    out_dir = out_dir or reports_dir()
    instance = dg.DagsterInstance.get()
    ensure_pool(instance)

    t = _step("ingest the demo knowledge base (Dagster job ingest_knowledge_base)")
    kb_config = {"source_dir": str(project_root() / "demo" / "kb"), "text_search": demo_text_search(),
                 "chunk_size": DEMO_CHUNK_SIZE, "chunk_overlap": DEMO_CHUNK_OVERLAP, "models": list(EMBEDDING_MODELS)}
    instance.add_dynamic_partitions("knowledge_base", [DEMO_KB])
    defs.resolve_job_def("ingest_knowledge_base").execute_in_process(
        instance=instance, partition_key=DEMO_KB,
        run_config={**QUIET, "ops": {"knowledge_base": {"config": kb_config}}})
    print(f"    done in {time.perf_counter() - t:.1f}s", file=sys.stderr)

    instance.add_dynamic_partitions("dataset", [dataset])
    t = _step(f"evaluate {len(strategies)} strategies on {dataset} (one run of the Dagster job evaluate_strategies, "
              f"its strategies at once in one step, a partition {dataset}|<strategy> each)")
    stored = register_dataset(get_engine(), datasets_dir() / f"{dataset}.json")
    result = defs.resolve_job_def("evaluate_strategies").execute_in_process(
        instance=instance, raise_on_error=False, tags={"rag/dataset": dataset, "rag/source": "demo"},
        run_config={**QUIET, "ops": {"evaluate_click": {"config": {"dataset_id": stored.dataset_id,
                                                                   "runs": dict.fromkeys(strategies, "")}}}})
    summarised = {e.partition for e in result.get_asset_materialization_events()
                  if e.asset_key == dg.AssetKey("evaluation_run_summary")}  # each strategy stored
    failed = [v for v in strategies if f"{dataset}|{v}" not in summarised]
    for version in strategies:
        print(f"    {dataset}|{version}: {'FAILED' if version in failed else 'succeeded'}", file=sys.stderr)
    print(f"    done in {time.perf_counter() - t:.1f}s", file=sys.stderr)

    _step(f"compare strategies on {dataset} (Dagster job compare_strategies → asset strategy_comparison)")
    defs.resolve_job_def("compare_strategies").execute_in_process(partition_key=dataset, instance=instance,
                                                                  run_config=QUIET, raise_on_error=False)

    t = _step(f"answer {dataset} with {DEMO_ANSWERER} (Dagster jobs evaluate_answers, summarise_answers)")
    instance.add_dynamic_partitions("answerer", [DEMO_ANSWERER])
    answered = defs.resolve_job_def("evaluate_answers").execute_in_process(
        partition_key=answer_partition_key(dataset, DEMO_ANSWERER), instance=instance, run_config=QUIET,
        raise_on_error=False)
    if answered.success:
        defs.resolve_job_def("summarise_answers").execute_in_process(partition_key=dataset, instance=instance,
                                                                     run_config=QUIET, raise_on_error=False)
    else:
        failed.append(DEMO_ANSWERER)
    print(f"    {'succeeded' if answered.success else 'FAILED'} in {time.perf_counter() - t:.1f}s", file=sys.stderr)

    engine = get_engine()
    answer_runs = list_answer_runs(engine, dataset=dataset, answerer=DEMO_ANSWERER, limit=1).runs
    comparison = analysis.compare(engine, dataset, knowledge_base=DEMO_KB)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for run in sorted(comparison.runs, key=lambda r: r.strategy):
        path = out_dir / f"{dataset}-{run.strategy}.json"
        with atomic_output(path) as fp:
            evaluations.write_report(engine, run.run_id, fp)
        paths.append(path)
    sys.stdout.write(demo_summary(comparison, paths, dataset=dataset,
                                  answers=answer_runs[0] if answered.success else None))
    if failed:
        print(f"failed: {', '.join(failed)} (see the Dagster run logs)", file=sys.stderr)
        return 2
    return 0


SINGLE_LEG_NOTE = ("The demo ships deliberately weak single-leg strategies (vector-only, keyword-only, BM25-only) "
                   "next to the hybrid baseline")


ANSWER_FIGURES = (("EM", "exact_match"), ("F1", "f1"), ("citation P", "citation_precision"),
                  ("citation R", "citation_recall"), ("answer_score", "answer_score"))


def answer_figures(run: AnswerRun) -> str:
    """The answer figures of ``make run`` (mean and cases scored; "—" when undefined), then the verdicts."""
    s = run.summary
    figures = [(label, s.metrics[name]) for label, name in ANSWER_FIGURES[:4]]
    figures += [("refusal recall", s.refusal_recall), ("false refusal rate", s.false_refusal_rate),
                ("answer_score", s.metrics["answer_score"])]
    rows = [[label, "—" if m.mean is None else f"{m.mean:.3f}", f"{m.n_scored} scored"] for label, m in figures]
    verdicts = ", ".join(f"{v} {s.verdicts.get(v, 0)}" for v in VERDICTS)  # stored JSON keeps no key order
    return "\n".join([f"Answers of {run.answerer}@{run.answerer_version[:12]} on {run.dataset}: {s.answered}/"
                      f"{s.cases} cases answered ({s.unanswerable_cases} unanswerable), answer run {run.run_id[:8]}",
                      text_table(["figure", "mean", "cases"], rows, indent="  "), f"  verdicts: {verdicts}"])


def demo_summary(comp: StrategyComparison, report_paths: list[Path], *, dataset: str = "demo",
                 cli: str = ".venv/bin/rag-pipeline", answers: AnswerRun | None = None) -> str:
    """The plain-text end of ``make run``: comparison, answer figures, gate, report files, next commands."""
    lines = [render_plain(comp, details=False), ""]
    if answers is not None:
        lines += [answer_figures(answers), ""]
    if comp.gate.passed:
        lines.append(f"{SINGLE_LEG_NOTE}; none is significantly worse on the {comp.runs[0].cases} answerable cases.")
    else:
        failing = ", ".join(dict.fromkeys(comp.gate.failing))
        lines.append(f"{SINGLE_LEG_NOTE}, so a failed gate is expected here ({failing}): `make run` still "
                     "succeeds. In CI, `rag-pipeline compare` exits 1 on it.")
    lines.append("")
    if report_paths:
        folders = {p.parent for p in report_paths}
        if len(folders) == 1:
            lines.append(f"{len(report_paths)} JSON reports (one per strategy) in {next(iter(folders))}/:")
            lines += [f"  {p.name}" for p in report_paths]
        else:
            lines.append("JSON reports:")
            lines += [f"  {p}" for p in report_paths]
        lines.append("")
    run = next((r for r in comp.runs if r.strategy == comp.baseline), comp.runs[0] if comp.runs else None)
    steps = [("make dev", "the Dagster UI on http://127.0.0.1:3000 and the admin console on "
                          "http://127.0.0.1:8000/admin/retrieval-evaluations (same database)"),
             (f"{cli} runs --dataset {dataset}", "every run, newest first")]
    if run is not None:
        steps.append((f"{cli} show {run.run_id[:8]}", f"run {run.strategy} as JSON (a unique id prefix is enough)"))
    steps.append((f"{cli} compare --dataset {dataset}", "with paired significance and the cases that moved"))
    if answers is not None:
        steps.append((f"{cli} answers show {answers.run_id[:8]} --wrong-but-confident",
                       f"{answers.answerer}'s wrong answers that look grounded, with their citations"))
    lines += ["Next:", text_table(None, [[c, f"# {why}"] for c, why in steps], indent="  ")]
    lines.append("  (or `source .venv/bin/activate` once, then plain `rag-pipeline ...`)")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rag-pipeline demo", description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", action="append", help="only these strategy versions (repeatable; default all)")
    parser.add_argument("--output-dir", help="where the JSON reports go (default reports/)")
    args = parser.parse_args(argv)
    return run_demo(strategies=args.strategy or None, out_dir=Path(args.output_dir) if args.output_dir else None)


if __name__ == "__main__":
    sys.exit(main())
