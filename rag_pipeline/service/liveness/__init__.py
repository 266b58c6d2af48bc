"""Liveness: runs and daemons are checked, not assumed (docs/design.md §6.1, §7.3).

:mod:`.runs` ends the ``running`` evaluation runs whose process or Dagster run is gone; :mod:`.daemon` tells
whether a Dagster daemon really runs on a ``DAGSTER_HOME``.
"""
