"""TREC run files and qrels: import a run file as a stored run of an external strategy, export any run, a
dataset as qrels + topics and back (docs/evaluating.md, "Your own retriever")."""
