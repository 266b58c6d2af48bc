"""Evaluation datasets: reading and validating a file, the stored versions, the label check, the demo."""
