"""Labelling operations: :mod:`.chunks` (finding chunk ids to label), :mod:`.drafts` (the draft file and pooled
judging), :mod:`.fixes` (label fixes after a re-chunking)."""
