"""``python -m rag_pipeline.defs.workers config DIR`` writes the worker deployment's ``dagster.yaml`` into DIR (a
DAGSTER_HOME); ``… check`` says what a worker on this machine lacks (deploy/celery/README.md)."""

import argparse
import sys

from rag_pipeline.defs.workers import readiness


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rag_pipeline.defs.workers", description=__doc__)
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("config", help="write the shipped dagster.yaml into DIR").add_argument("dir", metavar="DIR")
    sub.add_parser("check", help="what a Celery worker needs: database, models, strategies")
    args = parser.parse_args(argv)
    if args.action == "config":
        print(f"wrote {readiness.write_config(args.dir)} (set DAGSTER_HOME={args.dir})")
        return 0
    missing, ok = readiness.problems()
    for line in missing:
        print(f"missing: {line}", file=sys.stderr)
    if not missing:
        print("ok: " + "; ".join(ok))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
