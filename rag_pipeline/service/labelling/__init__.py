"""Labelling operations: :mod:`.chunks` (finding chunk ids to label), :mod:`.drafts` (pooled judging),
:mod:`.draft_files` (reading and writing a draft), :mod:`.fixes` (label fixes after a re-chunking)."""
