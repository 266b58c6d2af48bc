"""The commands of ``rag-pipeline``: name → (the module under ``rag_pipeline.cli`` that registers it, its line in
the listing). ``rag-pipeline --help`` is printed from this table alone, and a command imports only its own module,
so the CLI starts without loading what other commands need."""

from __future__ import annotations

COMMANDS: dict[str, tuple[str, str]] = {
    "db": ("database", "embedded PostgreSQL: start (and write .env), stop, status, url, psql, password"),
    "demo": ("database", "the main job: ingest the demo KB, evaluate every strategy through Dagster, compare them, "
                         "write reports/ (make run)"),
    "ingest": ("knowledge_bases", "ingest a folder of .md/.txt/.html/.jsonl documents into a knowledge base"),
    "import-beir": ("knowledge_bases", "import a BEIR folder as a knowledge base + evaluation dataset"),
    "kb": ("knowledge_bases", "show a knowledge base's counts and content version"),
    "embeddings": ("embeddings", "embedding models: list them, add one served by an OpenAI-compatible "
                                 "/v1/embeddings endpoint"),
    "doc": ("knowledge_bases", "mark a document ready/processing/failed, published/unpublished, deleted"),
    "chunks": ("labelling", "list or search a knowledge base's chunk ids (what a dataset labels)"),
    "suggest": ("labelling", "pool the top candidates of several strategies per question into a label draft (TREC-"
                             "style pooling)"),
    "label": ("labelling", "judge a label draft in the terminal (resumable), or export it as a dataset"),
    "fix-labels": ("labelling", "re-map a dataset's labels to a knowledge base's current chunks (after a re-"
                                "chunking); exit 1 when some are left for a person"),
    "evaluate": ("evaluate", "evaluate strategies on a dataset file, store the runs, write a report"),
    "runs": ("evaluate", "evaluation run history (newest first)"),
    "show": ("evaluate", "one run as the report (summary, cases, candidates; JSON, JSON Lines or text)"),
    "check-dataset": ("check_dataset", "check every relevant id of a dataset against a knowledge base (why are all "
                                       "metrics 0?); exit 1 when some label is invalid"),
    "agreement": ("agreement", "annotator agreement of a dataset (Cohen's and Fleiss' κ, raw agreement, base "
                               "rates) and its disagreements to adjudicate"),
    "compare": ("compare", "compare the current runs of every strategy on a dataset with a baseline (paired "
                           "significance, regression gate: exit 1 when it fails)"),
    "tune": ("tune", "tune the fusion on a stored run's candidate pools (weights, normalisation, RRF k) with cross-"
                     "validation; prints a ready-to-add strategy"),
    "strategy": ("strategies", "add a strategy version to a registry file"),
    "trec": ("trec", "TREC run files and qrels: import a run file as a run of your own retriever, export runs and "
                     "datasets"),
    "answers": ("answers.commands", "score a RAG system's answers (answer quality, citations, refusal)"),
    "serve": ("serve", "serve the HTTP API (/api/v1, OpenAPI at /docs) and the admin console (/admin/retrieval-"
                       "evaluations)"),
    "doctor": ("doctor", "check the database, the Dagster daemon, the models, a CJK font and chromium, each OK / WARN"
                         " / FAIL with the fix (exit 1 when a check fails)"),
}
EXIT_CODES_HELP = ("exit codes: 0 success; 1 a check found a problem (regression gate, invalid labels, --strict); "
                   "2 bad input or configuration; 3 database failure mid-run; 70 internal error; 73 an output file not "
                   "written (e.g. a full disk; a run already stored says so)")
