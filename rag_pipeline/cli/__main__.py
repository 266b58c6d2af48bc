"""``python -m rag_pipeline.cli``: the ``rag-pipeline`` command (what ``serve`` re-executes itself as)."""

import sys

from rag_pipeline.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
