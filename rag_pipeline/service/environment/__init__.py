"""What this machine needs to run the product (the database, the Dagster daemon, the models, a CJK font, a
browser), checked one by one for ``rag-pipeline doctor`` (docs/design.md §7.2)."""
