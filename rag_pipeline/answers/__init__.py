"""Answers: answers files, answer / citation / refusal metrics, verdicts, storage, collection (docs/design.md §12)."""
