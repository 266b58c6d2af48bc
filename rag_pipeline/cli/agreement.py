"""``rag-pipeline agreement``: how far a dataset's annotators agree, its open disagreements, and (``--resolved``)
the file with the labels the rule gives (docs/labelling.md, "Several annotators")."""

from __future__ import annotations

import argparse

from rag_pipeline.cli.errors import guarded
from rag_pipeline.cli.output import print_json
from rag_pipeline.contracts.agreement import AgreementReport, Kappa
from rag_pipeline.service import datasets
from rag_pipeline.storage.engine import get_engine
from rag_pipeline.storage.names import printable

MAX_SHOWN = 50


def _k(kappa: Kappa) -> str:
    return "n/a" if kappa.value is None else f"{kappa.value:.3f}"


def _f(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def format_agreement(report: AgreementReport) -> str:
    """The report as text: the pairs' table, Fleiss' κ, the undefined κ's reasons, the open disagreements."""
    from rag_pipeline.analysis.text_table import text_table  # noqa: PLC0415 - keeps the CLI's start light

    lines = [f"dataset {printable(report.dataset)} (version {report.version}, knowledge base "
             f"{printable(report.knowledge_base)}): {len(report.annotators)} annotators, {report.judgments} "
             f"judgments of {report.items} (case, chunk) items in {report.judged_cases} of {report.cases} cases"]
    if not report.annotators:
        return lines[0] + "\nno case has judgments: nothing to compare (docs/labelling.md, \"Several annotators\")"
    lines.append(f"labels: {report.rule}; " + ", ".join(f"{r} {n}" for r, n in report.resolutions.items()))
    rows = [[f"{printable(p.a)} × {printable(p.b)}", str(p.n), _f(p.raw_agreement), _k(p.kappa), _k(p.linear_kappa),
             _k(p.quadratic_kappa), _k(p.relevance_kappa), f"{_f(p.base_rate_a)} / {_f(p.base_rate_b)}"]
            for p in report.pairs]
    lines.append(text_table(["pair", "n", "agree", "κ", "κ linear", "κ quadratic", "κ relevant", "base rates"],
                            rows))
    if report.group:
        g = report.group
        lines.append(f"all {len(g.annotators)} (items every one judged, n={g.n}): Fleiss' κ {_k(g.fleiss_kappa)}, "
                     f"mean pairwise agreement {_f(g.mean_pairwise_agreement)}")
    reasons = sorted({k.reason for p in report.pairs for k in (p.kappa, p.linear_kappa, p.quadratic_kappa,
                                                                 p.relevance_kappa) if k.reason}
                     | ({report.group.fleiss_kappa.reason} if report.group and report.group.fleiss_kappa.reason
                        else set()))
    lines += [f"n/a: {r}" for r in reasons]
    open_ = [d for d in report.disagreements if d.adjudicated_by is None]
    lines.append(f"{report.open_disagreements} open disagreement(s); settle one with a judgment marked "
                 "\"adjudicated\": true" if report.open_disagreements else "no open disagreement")
    for d in open_[:MAX_SHOWN]:
        grades = " ".join(f"{printable(a)}={g}" for a, g in d.grades.items())
        lines.append(f"  {printable(d.case_id)}  {d.chunk_id}  {grades}  → {d.label} ({d.rule})")
    if len(open_) > MAX_SHOWN:
        lines.append(f"  … and {len(open_) - MAX_SHOWN} more (--format json lists up to 1000)")
    return "\n".join(lines)


@guarded(ValueError)
def cmd_agreement(args: argparse.Namespace) -> int:
    report, resolved = datasets.dataset_agreement(get_engine, args.dataset, knowledge_base=args.knowledge_base,
                                                  resolved=args.resolved)
    if args.format == "json":
        print_json(report.model_dump())
    else:
        print(format_agreement(report))
        if resolved:
            print(f"wrote {printable(resolved)}: the labels the rule gives (dataset version {report.version})")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("agreement")
    p.add_argument("dataset", help="a dataset file, or the name of a stored dataset (with --knowledge-base)")
    p.add_argument("--knowledge-base", help="the knowledge base (a bare-array file or a stored dataset)")
    p.add_argument("--resolved", metavar="OUT",
                   help="write the file with relevant_chunk_ids set to the labels the rule gives its judgments "
                        "(a file only; the input is not changed)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(func=cmd_agreement)
