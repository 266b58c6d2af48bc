"""A run of strategies over a dataset: its lifecycle and owner, its stored results, cases, candidates and report."""
