"""Build the demo evaluation dataset (``datasets/demo.json``) from ``demo/cases.yaml``: each case's quotes mapped
to the chunks containing them (deterministic chunk ids, no database), answer fields copied as written."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from rag_pipeline.knowledge_base import chunking
from rag_pipeline.knowledge_base.sources import read_folder
from rag_pipeline.storage.files import write_atomic

DEMO_KB = "demo"
DEMO_TEXT_SEARCH = "mixed"  # Chinese and English documents: jieba words, English stemming (textsearch.py)
DEMO_CHUNK_SIZE = 500
DEMO_CHUNK_OVERLAP = 80
ANSWER_FIELDS = ("reference_answers", "answerable", "key_points")


def build_demo_dataset(kb_dir: str | Path, cases_file: str | Path, *, chunk_size: int = DEMO_CHUNK_SIZE,
                       chunk_overlap: int = DEMO_CHUNK_OVERLAP) -> dict:
    spec = yaml.safe_load(Path(cases_file).read_text(encoding="utf-8"))
    kb_name = spec.get("knowledge_base", DEMO_KB)
    docs = {d.original_name: d for d in read_folder(kb_dir)}
    cases = []
    for case in spec["cases"]:
        relevant: list[str] = []
        for ref in case.get("relevant") or ():
            doc = docs.get(ref["doc"])
            if doc is None:
                raise ValueError(f"{cases_file}: case {case['case_id']}: unknown document {ref['doc']!r}")
            start = doc.text.find(ref["quote"])
            if start < 0 or doc.text.find(ref["quote"], start + 1) >= 0:
                raise ValueError(f"{cases_file}: case {case['case_id']}: quote not found exactly once in {ref['doc']}")
            end = start + len(ref["quote"])
            pieces = chunking.chunk_text(doc.text, chunk_size, chunk_overlap)
            hits = [c for c in pieces if c.char_start <= start and end <= c.char_end]
            if not hits:  # the quote straddles a boundary: every chunk it overlaps counts
                hits = [c for c in pieces if c.char_start < end and start < c.char_end]
            for c in hits:
                cid = str(chunking.chunk_id(kb_name, doc.original_name, c))
                if cid not in relevant:
                    relevant.append(cid)
        cases.append({"case_id": case["case_id"], "question": case["question"],
                      "relevant_chunk_ids": relevant, "k": int(case["k"]),
                      **{key: case[key] for key in ANSWER_FIELDS if key in case}})
    return {"name": "demo", "knowledge_base": kb_name, "cases": cases}


def write_demo_dataset(root: Path, out: Path | None = None) -> Path:
    """Write the demo dataset to ``out`` (default ``datasets/demo.json``), named after the file (a dataset
    is identified by its file name)."""
    out = out or root / "datasets" / "demo.json"
    data = {**build_demo_dataset(root / "demo" / "kb", root / "demo" / "cases.yaml"), "name": out.stem}
    write_atomic(out, json.dumps(data, ensure_ascii=False, indent=2) + "\n", parents=True)
    return out
