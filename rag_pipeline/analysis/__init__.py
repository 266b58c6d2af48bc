"""Analysis of stored runs: strategy comparison with paired statistics and a regression gate, fusion tuning
with cross-validation. Reads what evaluation stored; evaluation never imports it."""
