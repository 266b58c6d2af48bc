"""The ``rag-pipeline`` command: argparse adapters over :mod:`rag_pipeline.service` (no Dagster needed).

One module per group of commands (:mod:`.database`, :mod:`.knowledge_bases`, :mod:`.evaluate`,
:mod:`.diagnose`, :mod:`.tune`); :mod:`.main` assembles the parser; :mod:`.errors` turns every failure into
one line and an exit code; :mod:`.output` prints JSON and progress bars.
"""

from rag_pipeline.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
