"""Answers: answers files, answer / citation / refusal metrics, verdicts, storage, collection.

The reference is docs/design.md §12.
"""
