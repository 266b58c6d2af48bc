"""Stored answer runs (docs/design.md §12.6): their statements (:mod:`.queries`) and reading and writing them
(:mod:`.persistence`)."""
