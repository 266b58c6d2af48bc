"""Stored answer runs (docs/design.md §12.6): statements and persistence."""
