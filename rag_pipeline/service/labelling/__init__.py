"""Labelling operations: finding chunk ids, the pooled draft and its judging, label fixes."""
