"""Choose extractive-v1's refusal threshold on its train questions (demo/answerer-train.yaml), never on the test
cases (datasets/demo.json).

The demo knowledge base is ingested (idempotent) into the configured database; each train question is retrieved
with the strategy (default hybrid-v1) and answered by the real answerer with no score threshold, which tells
whether it would answer at all (some sentence shares a term with the question). At threshold ``t`` the answerer
answers when the top candidate's final score is >= ``t`` and it would answer; the decision is right when it
answers an answerable question or refuses an unanswerable one. The script prints every question's top score and
the accuracy curve over the candidate thresholds (the midpoints between consecutive top scores, and one below /
above all), and the chosen threshold: the highest accuracy, ties to the widest gap between the scores around
it, then the lower threshold.

    python bench/answerer_threshold.py [--strategy hybrid-v1] [--train demo/answerer-train.yaml]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.benchutil import machine_line  # noqa: E402
from rag_pipeline.answers.collection.answerers import DEFAULT_STRATEGY, get_answerer  # noqa: E402
from rag_pipeline.evaluation.datasets import demo as demo_dataset  # noqa: E402
from rag_pipeline.evaluation.datasets.load import EvaluationCase  # noqa: E402
from rag_pipeline.knowledge_base.ingestion import ingest_documents  # noqa: E402
from rag_pipeline.knowledge_base.lifecycle import resolve_knowledge_base  # noqa: E402
from rag_pipeline.knowledge_base.sources import read_folder  # noqa: E402
from rag_pipeline.retrieval.search import hybrid_search_batch  # noqa: E402
from rag_pipeline.retrieval.strategies import get_strategy  # noqa: E402
from rag_pipeline.storage.engine import get_engine  # noqa: E402

NO_THRESHOLD = -1e9


def train_cases(path: Path) -> tuple[list[EvaluationCase], dict[str, bool]]:
    spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    cases = [EvaluationCase(c["case_id"], c["question"], (), int(c["k"]),
                            reference_answers=tuple(c.get("reference_answers", ())), answerable=c["answerable"])
             for c in spec["cases"]]
    return cases, {c.case_id: c.answerable for c in cases}


def accuracy(threshold: float, scores: dict[str, float], would_answer: dict[str, bool],
             answerable: dict[str, bool]) -> float:
    right = sum((scores[c] >= threshold and would_answer[c]) == answerable[c] for c in scores)
    return right / len(scores)


def choose_threshold(scores: dict[str, float], would_answer: dict[str, bool],
                     answerable: dict[str, bool]) -> tuple[float, list[tuple[float, float, float]]]:
    """The chosen threshold and the curve ``(threshold, accuracy, gap)`` over the candidates."""
    values = sorted(set(scores.values()))
    curve = [(values[0] - 0.01, accuracy(values[0] - 0.01, scores, would_answer, answerable), 0.0)]
    for low, high in zip(values, values[1:], strict=False):
        t = round((low + high) / 2, 4)
        curve.append((t, accuracy(t, scores, would_answer, answerable), high - low))
    curve.append((values[-1] + 0.01, accuracy(values[-1] + 0.01, scores, would_answer, answerable), 0.0))
    best = max(curve, key=lambda p: (p[1], p[2], -p[0]))
    return best[0], curve


def measure(engine, strategy, train: Path) -> tuple[dict[str, float], dict[str, bool], dict[str, bool]]:
    """Ingest the demo KB (idempotent); per train question its top final score, whether the answerer answers it
    with no score threshold, and whether it is answerable."""
    ingest_documents(engine, read_folder(ROOT / "demo" / "kb"), demo_dataset.DEMO_KB,
                     text_search=demo_dataset.DEMO_TEXT_SEARCH, chunk_size=demo_dataset.DEMO_CHUNK_SIZE,
                     chunk_overlap=demo_dataset.DEMO_CHUNK_OVERLAP)
    cases, answerable = train_cases(train)
    with engine.connect() as conn:
        kb = resolve_knowledge_base(conn, demo_dataset.DEMO_KB)
        traces = hybrid_search_batch(conn, knowledge_base_id=kb.id, queries=[c.question for c in cases],
                                     strategy=strategy, limits=[c.k for c in cases])
    scores = {c.case_id: (t.selected[0].final_score if t.selected else NO_THRESHOLD)
              for c, t in zip(cases, traces, strict=True)}
    answerer = get_answerer("extractive-v1", engine=engine, knowledge_base=demo_dataset.DEMO_KB, strategy=strategy,
                            refusal_threshold=NO_THRESHOLD)
    would_answer = {r.case_id: not r.refused for r in answerer.answer_cases(cases)}
    return scores, would_answer, answerable


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", default=DEFAULT_STRATEGY)
    parser.add_argument("--train", type=Path, default=ROOT / "demo" / "answerer-train.yaml")
    args = parser.parse_args(argv)
    strategy = get_strategy(args.strategy)
    scores, would_answer, answerable = measure(get_engine(), strategy, args.train)
    print(machine_line())
    print(f"strategy {strategy.version} ({strategy.params_hash()[:12]}), {len(scores)} train questions "
          f"({sum(answerable.values())} answerable) from {args.train.relative_to(ROOT)}")
    print("\n| case | answerable | top final score | answers at no threshold |\n|---|---|---|---|")
    for case_id in sorted(scores, key=scores.get):
        print(f"| {case_id} | {answerable[case_id]} | {scores[case_id]:.4f} | {would_answer[case_id]} |")
    chosen, curve = choose_threshold(scores, would_answer, answerable)
    print("\n| threshold | train accuracy |\n|---|---|")
    for t, acc, _gap in curve:
        print(f"| {t:.4f} | {acc:.3f}{' ← chosen' if t == chosen else ''} |")
    print(f"\nchosen refusal_threshold = {chosen:.4f} (train accuracy "
          f"{accuracy(chosen, scores, would_answer, answerable):.3f})")


if __name__ == "__main__":
    main()
