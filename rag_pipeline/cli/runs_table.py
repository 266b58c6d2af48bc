"""The ``runs`` table of the CLI (``rag-pipeline runs``, the summary after ``evaluate``) and its legend."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from rag_pipeline.analysis.text_table import text_table
from rag_pipeline.contracts.metrics import HEADLINE_METRICS, METRIC_LABELS
from rag_pipeline.storage.names import printable

RUNS_LEGEND = (
    "cases = every case of the dataset; (N scored) = the answerable ones, which the metrics average over (what "
    "`compare` counts), when some are unanswerable\n"
    "* = the current run of its dataset × knowledge base × strategy (what `compare` uses); "
    "`rag-pipeline show <run>`\n"
    "status: queued (submitted over HTTP, waiting for a Dagster daemon) · running (in progress) · succeeded · "
    "failed (`show` has the error) · "
    "abandoned (no heartbeat for RAG_RUN_STALE_SECONDS)\n"
    "kb version = content version of the knowledge base the run measured (`rag-pipeline kb <kb>` prints the "
    "current one; - = not recorded, a run older than this column)\n"
    "Judged@k = share of the top k that carries a judgment (docs/metrics.md); unjudged chunks score as not relevant"
)
"""The lines :func:`comparison_table` prints under a table."""


def utc_minute(value) -> str:
    """``YYYY-MM-DD HH:MM`` in UTC of an ISO timestamp (a naive one is taken as UTC); ``-`` for none."""
    if not value:
        return "-"
    when = value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))
    if when.tzinfo is not None:
        when = when.astimezone(dt.UTC)
    return when.strftime("%Y-%m-%d %H:%M")


def _judged(summary: dict) -> str:
    """The run's mean Judged@k (docs/metrics.md); ``-``: not recorded or undefined."""
    value = ((summary.get("counts") or {}).get("judged") or {}).get("at_k")
    return "-" if value is None else f"{value:.2f}"


KB_VERSION_SHOWN = 12
"""Characters of the knowledge-base version a table shows (``-``: a run made before versions were recorded)."""


def scored(summary: dict) -> str:
    """`` (N scored)`` when some cases of the run are unanswerable (no retrieval metric), else nothing."""
    unanswerable = (summary.get("counts") or {}).get("unanswerable_cases") or 0
    return f" ({summary['case_count'] - unanswerable} scored)" if unanswerable else ""


def comparison_table(summaries: Sequence[dict], metrics: Sequence[str] = HEADLINE_METRICS, *,
                     legend: bool = True) -> str:
    """A plain-text table of run summaries (one row per run), for the CLI: status (``*`` = current), cases, the
    metrics, started/finished (UTC, to the minute) and the run id's first 8 characters (more when two listed
    ids share them; a unique prefix is accepted wherever a run id is); with ``legend``, :data:`RUNS_LEGEND` under it."""
    headers = ["strategy", "dataset", "status", "cases", *(METRIC_LABELS.get(m, m) for m in metrics), "Judged@k",
               "kb version", "started (UTC)", "finished", "run"]
    ids = [printable(s["run_id"]) for s in summaries]
    short = 8  # longer only when two listed ids share their first 8 characters
    while len({i[:short] for i in ids}) < len(set(ids)) and short < 36:
        short += 1
    body = [[printable(s["strategy_version"]), printable(s["dataset"]["name"]),  # control characters escaped
             s["status"] + ("*" if s["is_current"] else ""),
             f"{s['case_count']}{scored(s)}", *(f"{s[m]:.4f}" if s[m] is not None else "-" for m in metrics),
             _judged(s),
             ((s.get("knowledge_base") or {}).get("version") or "-")[:KB_VERSION_SHOWN],
             utc_minute(s.get("started_at")), utc_minute(s.get("finished_at")), run_id[:short]]
            for s, run_id in zip(summaries, ids, strict=True)]
    notes = "".join(f"\nnote: {n}" for n in content_notes(summaries))
    return text_table(headers, body) + notes + ("\n" + RUNS_LEGEND if legend else "")


def content_notes(summaries: Sequence[dict]) -> list[str]:
    """One line per knowledge base whose listed runs saw different content (kb versions), e.g. an attached database
    that changed between two evaluations."""
    seen: dict[str, set[str]] = {}
    for s in summaries:
        kb = s.get("knowledge_base") or {}
        if kb.get("version"):
            seen.setdefault(printable(kb.get("name") or ""), set()).add(kb["version"])
    return [f"the runs of knowledge base {name} listed here saw {len(versions)} different contents (kb version): "
            "their numbers are not all of the same data" for name, versions in sorted(seen.items())
            if len(versions) > 1]
