"""``rag-pipeline answers``: score, read, compare and collect a RAG system's answers (docs/design.md §7.2, §12).

:mod:`.commands` has ``evaluate``, ``runs``, ``show``, ``compare`` and the group's parser, :mod:`.tables` their
text form, :mod:`.collect` the ``collect`` command.
"""
