"""Benchmark answer scoring (rag_pipeline.answers) against the official SQuAD v2.0 / CMRC 2018 functions.

Seeded synthetic cases, mixed: 40 % long Chinese answers (~300 characters, inline ``[n]`` citations) against
~200-character references, 30 % short CMRC-like Chinese answers, 30 % short SQuAD-like English ones; one case in
ten is unanswerable (refused or answered). Each case cites two of its three chunks of ~400 characters (the
relevant one or not) and "retrieved" two, so lexical support, the citation metrics and every verdict run too. Timed:

* ours ``score_answers`` (every metric, citations, verdicts) + ``summarise`` over all ``--cases``;
* ours ``exact_match`` + ``f1`` alone, and the official scripts' EM + F1 (the transcription in
  ``rag_pipeline_tests/answers/official_scripts.py``, O(n·m) ``find_lcs``), on the first ``--baseline-cases``
  answerable cases (the official LCS on 10,000 long answers takes minutes).

The bench exits non-zero unless our F1 / EM equal the official ones within 1e-9 on the baseline cases. The last
line is ``cases=<n> ours_s=<x> ours_cpu_s=<c> text_s=<y> official_s=<z> vs_official=<r> max_diff=<d>``.

The command end to end (``rag-pipeline answers evaluate`` of a SQuAD v2.0 file: imports, dataset check, this
scoring, persistence, report) is timed by ``bench/answers_e2e_bench.py``.

Usage: python bench/answers_bench.py [--cases 10000] [--baseline-cases 1000] [--repeats 1]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchutil import best_time, machine_line  # bench/ is on sys.path

from rag_pipeline.answers.metrics.scoring import score_answers
from rag_pipeline.answers.metrics.summary import summarise
from rag_pipeline.answers.metrics.text_metrics import exact_match, f1, is_mostly_cjk
from rag_pipeline.contracts.answers import AnswerRecord, AnswerScoring
from rag_pipeline.evaluation.datasets.load import EvaluationCase
from rag_pipeline_tests.answers import official_scripts as official

TOLERANCE = 1e-9
EN_WORDS = ("the", "a", "of", "in", "city", "river", "capital", "France", "Paris", "tower", "built", "1889",
            "metres", "tall", "3.5", "million", "people", "visit", "each", "year", "Eiffel", "Gustave", "it's")


def _zh(rng: random.Random, pool: list[str], n: int) -> str:
    chars = rng.choices(pool, weights=[1 / (i + 1) for i in range(len(pool))], k=n)
    for i in range(12, n, rng.randint(15, 30)):
        chars[i] = rng.choice("，。、；")
    return "".join(chars)


def make_data(n: int, seed: int) -> tuple[list[EvaluationCase], dict[str, AnswerRecord], dict[str, str]]:
    """Seeded cases, their answer records and the text of every chunk."""
    rng = random.Random(seed)
    pool = [chr(0x4E00 + i) for i in rng.sample(range(20_000), 2500)]
    cases, records, texts = [], {}, {}
    for i in range(n):
        ids = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(3)]
        kind = rng.random()
        if kind < 0.4:
            ref = _zh(rng, pool, 200)
            answer = _zh(rng, pool, 60) + ref[rng.randint(0, 50):rng.randint(120, 200)] + "[1]。" + \
                _zh(rng, pool, 100) + "[2]。"
        elif kind < 0.7:
            ref = _zh(rng, pool, rng.randint(2, 8))
            answer = rng.choice([ref, ref + "。[1]", _zh(rng, pool, 3) + ref + "。[1]", _zh(rng, pool, 6) + "。[1]"])
        else:
            ref = " ".join(rng.choices(EN_WORDS, k=rng.randint(1, 5)))
            answer = rng.choice([ref, " ".join(rng.choices(EN_WORDS, k=rng.randint(2, 25))) + f" {ref}. [1]"])
        answerable = rng.random() >= 0.1
        if not answerable:
            answer = rng.choice(["信息不足，无法回答。", "I don't know.", answer])
        for cid in ids:
            texts[cid] = (ref if cid == ids[0] else "") + _zh(rng, pool, 400 - len(ref))
        case_id = f"case-{i}"
        cases.append(EvaluationCase(case_id, f"question {i}?", (ids[0],) if answerable else (), 10,
                                    reference_answers=(ref,) if answerable else (), answerable=answerable))
        records[case_id] = AnswerRecord(case_id=case_id, answer=answer, cited_chunk_ids=rng.choice([ids[:2], ids[1:]]),
                                        retrieved_chunk_ids=rng.sample(ids, 2), latency_ms=rng.uniform(100, 900))
    return cases, records, texts


def _official(prediction: str, references: list[str]) -> tuple[float, float]:
    if all(is_mostly_cjk(r) for r in references):
        return official.calc_em_score(references, prediction), official.calc_f1_score(references, prediction)
    return official.squad_scores(references, prediction)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; return 0, or 1 when our EM / F1 differ from the official ones."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--baseline-cases", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    cases, records, texts = make_data(args.cases, args.seed)
    scoring, kb = AnswerScoring(), set(texts)

    def ours():
        results = score_answers(cases, records, kb_chunk_ids=kb, chunk_text=texts, scoring=scoring)
        return results, summarise(results, cases=len(cases))

    cpu_start = time.process_time()
    ours_s, (results, summary) = best_time(ours, args.repeats)
    ours_cpu_s = (time.process_time() - cpu_start) / args.repeats
    pairs = [(records[c.case_id].answer, list(c.reference_answers)) for c in cases if c.answerable]
    pairs = pairs[:args.baseline_cases]
    text_s, mine = best_time(lambda: [(exact_match(p, r), f1(p, r)) for p, r in pairs], args.repeats)
    official_s, theirs = best_time(lambda: [_official(p, r) for p, r in pairs], 1)
    max_diff = max((abs(a - b) for m, t in zip(mine, theirs, strict=True) for a, b in zip(m, t, strict=True)),
                   default=0.0)
    long_zh = sum(len(p) >= 250 for p, _ in pairs)
    print(f"cases={args.cases} baseline_cases={len(pairs)} (long CJK answers among them: {long_zh}) "
          f"repeats={args.repeats} (best-of)")
    print(machine_line())
    print("means: " + " ".join(f"{n}={m.mean:.6f}" for n, m in summary.metrics.items() if m.mean is not None))
    print("verdicts: " + " ".join(f"{v}={n}" for v, n in summary.verdicts.items()))
    print(f"ours score_answers + summarise, {args.cases} cases   {ours_s:9.4f} s wall, {ours_cpu_s:9.4f} s CPU")
    print(f"ours exact_match + f1, {len(pairs)} cases            {text_s:9.4f} s")
    print(f"official EM + F1 (O(n*m) find_lcs), {len(pairs)} cases {official_s:9.4f} s")
    print(f"max |EM/F1 diff| vs official = {max_diff:.2e}")
    if max_diff > TOLERANCE or len(results) != args.cases:
        print(f"FAIL: scores differ from the official ones by more than {TOLERANCE}", file=sys.stderr)
        return 1
    print(f"cases={args.cases} ours_s={ours_s:.6f} ours_cpu_s={ours_cpu_s:.6f} text_s={text_s:.6f} "
          f"official_s={official_s:.6f} vs_official={official_s / text_s:.2f} max_diff={max_diff:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
