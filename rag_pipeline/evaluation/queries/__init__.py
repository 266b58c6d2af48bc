"""The evaluation stage's SQL, one module per table or concern; the service and analysis call these functions."""
