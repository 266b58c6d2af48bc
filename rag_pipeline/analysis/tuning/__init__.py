"""Fusion and stage tuning on stored candidate pools: :mod:`.sweep` (grid, cross-validation, recommendation),
:mod:`.stages` (complete pools, the rerank stage; choose on one dataset, report on another), :mod:`.stored_run`
(tuning a stored run), :mod:`.chart` (the sweep chart)."""
