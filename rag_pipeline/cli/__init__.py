"""The ``rag-pipeline`` command: argparse adapters over :mod:`rag_pipeline.service` (no Dagster needed)."""

from rag_pipeline.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
