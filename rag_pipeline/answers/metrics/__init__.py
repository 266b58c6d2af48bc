"""Scoring answers without an LLM (docs/design.md §12.3–§12.5): EM / F1 by the SQuAD v2.0 and CMRC 2018 rules,
citation and refusal metrics, sentences, verdicts, the per-case scorer and the run summary."""
