"""Benchmark ``rag-pipeline answers evaluate`` end to end on a SQuAD-v2.0-shaped dataset and prediction file.

The dataset is seeded and synthetic, shaped as SQuAD v2.0 dev (no file is downloaded): articles of ~34 paragraphs,
~10 questions a paragraph, contexts of ~120 words drawn from a Zipf vocabulary (names, numbers, punctuation),
questions of ~10 words, reference answers that are spans of their context (1–4 of them, some repeated as the
annotators' are), a share ``--unanswerable`` of questions ``is_impossible`` with ``plausible_answers``. The
predictions are the official ``{question id: answer}`` file: for an answerable question the reference, a span that
overlaps it or another span of the context; for an unanswerable one ``""`` or a span.

For each size of ``--cases`` the real command runs in a fresh process, as a user runs it (database:
``RAG_DATABASE_URL`` if set, else the embedded server in a scratch ``RAG_PGDATA``; a one-chunk knowledge base
ingested first; each run on a fresh copy of the dataset file, so it stores the dataset as a first evaluation does;
the run is stored, the report written with ``--output``)::

    python -m rag_pipeline.cli answers evaluate --knowledge-base K --dataset squad-N.json --answers preds-N.json \\
        --output report-N.json --quiet

timed wall end to end (best of ``--repeats``) with its peak RSS, as ``/usr/bin/time`` reports them.
Then, unless ``--no-breakdown``, the same command once under ``-X importtime`` (the imports, and whether pandas,
scipy or dagster were imported) and once under cProfile, whose cumulative times give the stages: dataset load and
check, answers file, scoring, summary, persistence, the engine (connect, migrations check), report write. The
report's official figures are checked against the transcribed official script
(``rag_pipeline_tests/answers/official_scripts.py``); the bench exits non-zero when they differ.

``--before CHECKOUT`` runs the same command with another checkout's ``rag_pipeline`` (``PYTHONPATH``) too, the two
alternating run by run: the before and after of a change side by side under the same load. The last line is
``cases=<n> wall_s=<x> max_rss_mb=<m> imports_s=<i> heavy=<libraries|none> ...`` of this checkout at the last size.

Usage: python bench/answers_e2e_bench.py [--cases 1000,4000,11873] [--repeats 3] [--unanswerable 0.33]
                                         [--before /work/main] [--no-breakdown] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from benchutil import machine_line  # noqa: E402 - bench/ on sys.path

KB = "squad-bench"
HEAVY = ("pandas", "scipy", "dagster", "sklearn", "torch", "sentence_transformers", "matplotlib", "statsmodels")
STAGES = {  # stage -> the (file suffix, function name) pairs whose cumulative time it is (the largest found)
    "dataset load + check": [("evaluation/datasets/resolve.py", "resolve_dataset")],
    "answers file": [("answers/answers_file.py", "read_answers")],
    "scoring": [("answers/metrics/scoring.py", "score_answers")],
    "summary": [("answers/metrics/summary.py", "summarise")],
    "persistence (dataset)": [("evaluation/runs/results.py", "store_dataset")],
    "persistence (run)": [("answers/runs/persistence.py", "store_run")],
    "report write": [("cli/answers/commands.py", "write_report"), ("storage/files.py", "write_atomic")],
    "engine (connect, migrations)": [("storage/engine.py", "get_engine")],  # called by cmd_evaluate
    "evaluate_answers": [("service/answers.py", "evaluate_answers")],
    "cmd_evaluate": [("cli/answers/commands.py", "cmd_evaluate")],
}
WORDS = ("the of and in to a was is for on as by with that from at his an were which are or it its be also first "
         "has had this city one their new after two during other century war state government university world "
         "river church population area system known empire people century north south west east king law "
         "american british french german roman early time years many most large called group used became "
         "between later however under where while water power energy building school music company party "
         "national public since both such through than years series based history several united modern").split()
NAMES = ("Normandy Rollo Paris Charles Denmark Iceland Norway Edward William Harold Frederick Victoria London "
         "Warsaw Vistula Chopin Tesla Edison Westinghouse Huguenots Calvin Geneva Amazon Brazil Rhine Basel "
         "Kenya Nairobi Oxygen Lavoisier Priestley Genghis Mongolia Kublai Yuan Beyonce Houston Destiny").split()


def _sentence(rng: random.Random, n: int) -> list[str]:
    words = []
    for _ in range(n):
        r = rng.random()
        if r < 0.08:
            words.append(rng.choice(NAMES))
        elif r < 0.11:
            words.append(str(rng.choice([rng.randint(2, 99), rng.randint(1000, 2020), rng.randint(100, 9999)])))
        else:
            words.append(WORDS[min(int(rng.paretovariate(0.9)) - 1, len(WORDS) - 1)])
    words[0] = words[0].capitalize()
    return words


def _context(rng: random.Random) -> list[str]:
    words: list[str] = []
    while len(words) < rng.randint(80, 180):
        sentence = _sentence(rng, rng.randint(12, 30))
        sentence[-1] += "."
        for i in range(4, len(sentence) - 1, rng.randint(6, 12)):
            sentence[i] += ","
        words += sentence
    return words


def _span(rng: random.Random, words: list[str], length: int) -> tuple[str, int]:
    start = rng.randrange(0, len(words) - length)
    return " ".join(words[start:start + length]), start


def make_squad(n: int, seed: int = 0, unanswerable: float = 0.33) -> tuple[dict, dict[str, str]]:
    """A SQuAD v2.0 document of ``n`` questions and its prediction file, seeded."""
    rng = random.Random(seed)
    articles: list[dict] = []
    predictions: dict[str, str] = {}
    made = 0
    while made < n:
        article = {"title": f"{rng.choice(NAMES)}_{len(articles)}", "paragraphs": []}
        for _ in range(rng.randint(20, 48)):
            if made >= n:
                break
            words = _context(rng)
            context = " ".join(words)
            qas = []
            for _ in range(min(rng.randint(5, 15), n - made)):
                qid = f"{rng.getrandbits(96):024x}"
                question = " ".join(_sentence(rng, rng.randint(6, 16))) + "?"
                length = min(rng.choice([1, 1, 2, 2, 3, 3, 4, 5, 7, 10]), len(words) - 1)
                answer, start = _span(rng, words, length)
                if rng.random() < unanswerable:
                    qas.append({"plausible_answers": [{"text": answer, "answer_start": context.find(answer)}],
                                "question": question, "id": qid, "answers": [], "is_impossible": True})
                    predictions[qid] = "" if rng.random() < 0.5 else _span(rng, words, length)[0]
                else:
                    refs = [answer]
                    for _ in range(rng.choice([0, 1, 2, 2, 3])):  # other annotators: same, shorter or longer
                        lo = max(0, start - rng.randint(0, 1))
                        hi = min(len(words), start + length + rng.randint(-1, 2))
                        refs.append(" ".join(words[lo:max(hi, lo + 1)]) if rng.random() < 0.6 else answer)
                    qas.append({"question": question, "id": qid, "is_impossible": False,
                                "answers": [{"text": r, "answer_start": max(context.find(r), 0)} for r in refs]})
                    kind = rng.random()
                    if kind < 0.55:
                        predictions[qid] = rng.choice(refs)
                    elif kind < 0.8:
                        lo = max(0, start + rng.randint(-3, 2))
                        predictions[qid] = " ".join(words[lo:lo + length + rng.randint(0, 4)]) or answer
                    else:
                        predictions[qid] = _span(rng, words, length)[0]
                made += 1
            article["paragraphs"].append({"qas": qas, "context": context})
        articles.append(article)
    return {"version": "v2.0", "data": articles}, predictions


def _env(work: Path, code: Path = ROOT) -> dict[str, str]:
    """The command's environment: ``RAG_DATABASE_URL`` when given, else a scratch embedded server in ``work``."""
    env = {k: v for k, v in os.environ.items() if k not in {"RAG_DAGSTER_PG_URL", "PYTHONPATH"}}
    if not env.get("RAG_DATABASE_URL"):
        env["RAG_PGDATA"] = str(work / "pgdata")
    env.update({"RAG_DATASETS_DIR": str(work / "datasets"), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(code)})
    return env


LAUNCHER = """
import resource, subprocess, sys, time
start = time.perf_counter()
code = subprocess.call(sys.argv[1:])
wall = time.perf_counter() - start
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(f"BENCH_CHILD wall={wall:.6f} maxrss_kb={rss}", file=sys.stderr)
sys.exit(code)
"""
"""Runs the command as its only child and reports its wall time and peak RSS, as ``/usr/bin/time`` does: from a
small process, because Linux counts the pre-``exec`` image of a forked child (here: the bench, with its data) in
the child's maximum RSS."""


def run_command(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, subprocess.CompletedProcess]:
    """Run ``argv`` under :data:`LAUNCHER`; its wall seconds and peak RSS in MB."""
    proc = subprocess.run([sys.executable, "-c", LAUNCHER, *argv], env=env, cwd=cwd, capture_output=True, text=True)
    head, _, last = proc.stderr.rstrip("\n").rpartition("\n")
    fields = dict(item.split("=") for item in last.removeprefix("BENCH_CHILD ").split())
    return float(fields["wall"]), int(fields["maxrss_kb"]) / 1024, subprocess.CompletedProcess(
        argv, proc.returncode, proc.stdout, head)


def evaluate_argv(work: Path, n: int, run: str, *prefix: str) -> list[str]:
    """The command on a fresh copy of the dataset file (named ``squad-<n>-<run>``: a new dataset, stored by the
    run as a first evaluation stores it)."""
    dataset = work / f"squad-{n}-{run}.json"
    shutil.copyfile(work / f"squad-{n}.json", dataset)
    return [sys.executable, *prefix, "-m", "rag_pipeline.cli", "answers", "evaluate", "--knowledge-base", KB,
            "--dataset", str(dataset), "--answers", str(work / f"predictions-{n}.json"),
            "--output", str(work / f"report-{n}.json"), "--quiet"]


def import_breakdown(stderr: str) -> tuple[float, list[str], list[tuple[float, str]]]:
    """``-X importtime`` output: total seconds (top-level cumulative), the heavy packages imported, the slowest."""
    total, heavy, top = 0.0, set(), []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.removeprefix("import time:").split("|")
        module = name.strip()
        if module.split(".")[0] in HEAVY:
            heavy.add(module.split(".")[0])
        if len(name) - len(name.lstrip()) == 1:  # a top-level import (nested ones are indented further)
            total += int(cumulative.strip()) / 1e6
            top.append((int(cumulative.strip()) / 1e6, module))
    return total, sorted(heavy), sorted(top, reverse=True)[:6]


def stage_breakdown(profile: Path) -> dict[str, float]:
    """The cumulative seconds of each stage's function in a cProfile dump (0 for one not called)."""
    stats = pstats.Stats(str(profile)).stats  # type: ignore[attr-defined]
    found = {}
    for stage, functions in STAGES.items():
        found[stage] = max((v[3] for (file, _, name), v in stats.items()
                            if any(name == func and file.endswith(suffix) for suffix, func in functions)), default=0.0)
    total = max(v[3] for v in stats.values())
    found["whole process (profiled)"] = total
    return found


def check_official(work: Path, n: int, squad: dict, predictions: dict[str, str]) -> float:
    """The largest difference between the report's official figures and the transcribed official script's."""
    from rag_pipeline_tests.answers import official_scripts as oracle

    official = json.loads((work / f"report-{n}.json").read_text(encoding="utf-8"))["summary"]["official"]
    expected = oracle.squad_main(squad, predictions)
    pairs = [(official["exact"], expected["exact"]), (official["f1"], expected["f1"]),
             (official["total"], expected["total"]), (official.get("has_ans_f1"), expected.get("HasAns_f1")),
             (official.get("no_ans_exact"), expected.get("NoAns_exact"))]
    return max(abs(a - b) for a, b in pairs if a is not None and b is not None)


def setup(work: Path) -> None:
    """The embedded server and a one-chunk knowledge base (no embedding model: answers need none)."""
    os.environ.update(_env(work))
    from rag_pipeline.knowledge_base.ingestion import ingest_documents
    from rag_pipeline.knowledge_base.sources import read_folder
    from rag_pipeline.storage.engine import get_engine

    docs = work / "docs"
    docs.mkdir()
    (docs / "note.md").write_text("Answers are scored against SQuAD-shaped references.\n", encoding="utf-8")
    ingest_documents(get_engine(), read_folder(docs), KB, text_search="english", chunk_size=500, chunk_overlap=80,
                     models=())


def timed_run(work: Path, n: int, code: Path, run: str, squad: dict, predictions: dict[str, str]
              ) -> tuple[float, float] | None:
    """One timed run of the command with ``code``'s rag_pipeline: (wall s, peak RSS MB), or None when it failed or
    the report's official figures differ from the official script's."""
    wall, rss, proc = run_command(evaluate_argv(work, n, run), _env(work, code), work)
    if proc.returncode != 0:
        print(proc.stdout[-2000:], proc.stderr[-3000:], file=sys.stderr)
        return None
    if (diff := check_official(work, n, squad, predictions)) > 1e-9:
        print(f"FAIL: the report's official figures differ from the official script's by {diff}", file=sys.stderr)
        return None
    return wall, rss


def breakdown(work: Path, n: int, code: Path, tag: str) -> str | None:
    """The command once under ``-X importtime`` and once under cProfile; the figures for the result line."""
    env = _env(work, code)
    _, _, proc = run_command(evaluate_argv(work, n, f"{tag}imports", "-X", "importtime"), env, work)
    imports_s, heavy, top = import_breakdown(proc.stderr)
    print(f"    imports (-X importtime, top-level cumulative): {imports_s:.2f} s; heavy imported: "
          f"{', '.join(heavy) or 'none'}")
    print("      slowest: " + ", ".join(f"{m} {s:.2f}" for s, m in top))
    profile = work / f"profile-{n}-{tag}.prof"
    _, _, proc = run_command(evaluate_argv(work, n, f"{tag}profile", "-m", "cProfile", "-o", str(profile)), env, work)
    if proc.returncode != 0 or not profile.exists():
        print(proc.stderr[-3000:], file=sys.stderr)
        return None
    stages = stage_breakdown(profile)
    stages["report + flags (the rest of cmd_evaluate)"] = (stages["cmd_evaluate"] - stages["evaluate_answers"]
                                                           - stages["engine (connect, migrations)"])
    print("    stages (cProfile cumulative s; the profiler slows Python code, not the database):")
    for k, v in stages.items():
        print(f"      {k:<32} {v:6.2f}")
    return f"imports_s={imports_s:.3f} heavy={','.join(heavy) or 'none'} " + " ".join(
        f"{k.split(' ')[0]}_s={v:.3f}" for k, v in stages.items() if k in ("dataset load + check", "scoring"))


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; return 0, or 1 when a command fails or its figures differ from the official script's."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="1000,4000,11873", help="comma-separated sizes")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--unanswerable", type=float, default=0.33)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-breakdown", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--before", type=Path, metavar="CHECKOUT",
                        help="also run the command with another checkout's rag_pipeline (e.g. the main branch), "
                             "each size side by side, before this one")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.cases.split(",")]
    codes = [(args.before.resolve(), "before")] if args.before else []
    codes.append((ROOT, "after" if args.before else "this"))
    work = Path(tempfile.mkdtemp(prefix="answers_e2e_"))
    (work / "datasets").mkdir()
    try:
        setup(work)
        print(machine_line())
        last = ""
        for n in sizes:
            squad, predictions = make_squad(n, args.seed, args.unanswerable)
            (work / f"squad-{n}.json").write_text(json.dumps(squad, ensure_ascii=False), encoding="utf-8")
            (work / f"predictions-{n}.json").write_text(json.dumps(predictions, indent=2), encoding="utf-8")
            size_mb = (work / f"squad-{n}.json").stat().st_size / 1e6
            impossible = sum(qa["is_impossible"] for a in squad["data"] for p in a["paragraphs"] for qa in p["qas"])
            print(f"\n{n} questions ({impossible} unanswerable), dataset {size_mb:.1f} MB, "
                  f"load1 {os.getloadavg()[0]:.2f}")
            runs: dict[str, list[tuple[float, float]]] = {tag: [] for _, tag in codes}
            for r in range(args.repeats):  # the checkouts alternate: the same load for both
                for code, tag in codes:
                    result = timed_run(work, n, code, f"{tag}{r}", squad, predictions)
                    if result is None:
                        return 1
                    runs[tag].append(result)
                    print(f"  run {r + 1} {tag:<6}: wall {result[0]:6.2f} s  max RSS {result[1]:6.0f} MB  "
                          f"load1 {os.getloadavg()[0]:.2f}  ({code})")
            for code, tag in codes:
                wall, rss = min(runs[tag])
                print(f"  {tag:<6} best wall {wall:.2f} s, max RSS {rss:.0f} MB; official figures equal the "
                      f"official script's")
                last = f"cases={n} wall_s={wall:.3f} max_rss_mb={rss:.0f}"
                if not args.no_breakdown:
                    figures = breakdown(work, n, code, tag)
                    if figures is None:
                        return 1
                    last += " " + figures
        print(last)
        return 0
    finally:
        if (work / "pgdata").exists():
            from rag_pipeline.storage import embedded_server

            embedded_server.stop(work / "pgdata")
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
