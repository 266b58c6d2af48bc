"""HTTP side of deploy/celery/smoke.sh: one-click evaluations through the API, their outcome, their results.

Standard library only (it runs with the project's python). Every command prints JSON on stdout and exits 1 with
one line on stderr when the API answers something unexpected or a deadline passes.

    smoke_api.py evaluate BASE KB NAME DATASET_FILE STRATEGY...   queue one run per strategy; prints the run ids
    smoke_api.py wait BASE TIMEOUT_S RUN_ID...                     until every run has ended; prints each outcome
    smoke_api.py running BASE TIMEOUT_S RUN_ID                     until the run is running, cases done; its worker
    smoke_api.py results BASE OUT RUN_ID...                        every case of every run (all candidates) to OUT
    smoke_api.py same A B                                          the two results files hold identical cases
    smoke_api.py check OUTCOME_JSON RULE [WORKER]                  the outcome of `wait` obeys RULE (see check())
    smoke_api.py longer DATASET_FILE TIMES OUT                     the dataset's cases repeated TIMES times
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request

ENDED = {"succeeded", "failed", "abandoned"}


def fail(message: str) -> None:
    print(f"smoke: {message}", file=sys.stderr)
    raise SystemExit(1)


def call(url: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        fail(f"{url} answered {exc.code}: {exc.read().decode(errors='replace')[:500]}")


def summary(base: str, run_id: str) -> dict:
    return call(f"{base}/api/v1/retrieval/evaluations/{run_id}?candidates=none&limit=1")["summary"]


def evaluate(base: str, kb: str, name: str, dataset_file: str, *strategies: str) -> None:
    with open(dataset_file, encoding="utf-8") as handle:
        cases = json.load(handle)["cases"]
    answer = call(f"{base}/api/v1/knowledge-bases/{kb}/retrieval/evaluate",
                  {"cases": cases, "name": name, "strategy_versions": list(strategies)})
    print(json.dumps([run["run_id"] for run in answer["runs"]]))


def wait(base: str, timeout_s: str, *run_ids: str) -> None:
    deadline = time.monotonic() + float(timeout_s)
    while True:
        states = {run_id: summary(base, run_id) for run_id in run_ids}
        if all(s["status"] in ENDED for s in states.values()):
            print(json.dumps({run_id: {"status": s["status"], "worker": s.get("worker"), "error": s["error"],
                                       "strategy": s["strategy_version"]} for run_id, s in states.items()}))
            return
        if time.monotonic() > deadline:
            fail(f"runs not ended after {timeout_s}s: " + ", ".join(f"{r} {s['status']}" for r, s in states.items()))
        time.sleep(1)


def running(base: str, timeout_s: str, run_id: str) -> None:
    deadline = time.monotonic() + float(timeout_s)
    while True:
        state = summary(base, run_id)
        if state["status"] == "running" and state["cases_done"] > 0 and state.get("worker"):
            print(state["worker"])  # the worker's node name, NAME@host
            return
        if state["status"] in ENDED:
            fail(f"run {run_id} ended ({state['status']}) before it could be caught running")
        if time.monotonic() > deadline:
            fail(f"run {run_id} not running after {timeout_s}s (status {state['status']})")
        time.sleep(0.2)


def results(base: str, out: str, *run_ids: str) -> None:
    found = {}
    for run_id in run_ids:
        detail = call(f"{base}/api/v1/retrieval/evaluations/{run_id}?candidates=all&limit=1000")
        found[detail["summary"]["strategy_version"]] = detail["cases"]
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(found, handle, sort_keys=True)
    print(json.dumps({strategy: len(cases) for strategy, cases in found.items()}))


def same(a: str, b: str) -> None:
    with open(a, encoding="utf-8") as handle_a, open(b, encoding="utf-8") as handle_b:
        left, right = json.load(handle_a), json.load(handle_b)
    if sorted(left) != sorted(right):
        fail(f"different strategies: {sorted(left)} vs {sorted(right)}")
    for strategy in sorted(left):
        if not left[strategy]:
            fail(f"{strategy}: no cases")
        for x, y in zip(left[strategy], right[strategy], strict=True):
            if x != y:
                fail(f"{strategy}: case {x['case_id']} differs: {json.dumps(x)[:300]} vs {json.dumps(y)[:300]}")
    print(json.dumps(dict.fromkeys(sorted(left), "identical")))


def check(outcome_json: str, rule: str, worker: str = "") -> None:
    """``succeeded``: every run succeeded; ``two-workers``: and the runs name both Celery workers (w1, w2);
    ``failed``: the run failed or was abandoned; ``other``: it succeeded on a worker other than ``worker``."""
    outcome = json.loads(outcome_json)
    for state in outcome.values():
        print(f"   {state['strategy']:<12} {state['status']:<10} worker {state['worker']}  {state['error'] or ''}")
    statuses = {state["status"] for state in outcome.values()}
    workers = {state["worker"] for state in outcome.values()}
    if rule == "failed":
        if not statuses <= {"failed", "abandoned"}:
            fail(f"the killed worker's run is {statuses}, not failed or abandoned")
        return
    if statuses != {"succeeded"}:
        fail(f"not every run succeeded: {statuses}")
    if rule == "two-workers" and {(w or "").split("@")[0] for w in workers} != {"w1", "w2"}:
        fail(f"the runs did not run on both Celery workers: {sorted(map(str, workers))}")
    if rule == "other" and (None in workers or worker in workers):
        fail(f"the relaunch ran on {sorted(map(str, workers))}, not on a worker other than {worker}")


def first(ids_json: str) -> None:
    print(json.loads(ids_json)[0])


def ids(ids_json: str) -> None:
    print("\n".join(json.loads(ids_json)))


def longer(dataset_file: str, times: str, out: str) -> None:
    """The dataset's cases ``times`` over, each copy's questions worded apart (a copy of a question would be served
    from the run's caches at no cost, and the run would end before anyone could catch it running)."""
    with open(dataset_file, encoding="utf-8") as handle:
        data = json.load(handle)
    data["cases"] = [dict(case, case_id=f"{case['case_id']}-{i}", question=f"{case['question']} ({i})")
                     for i in range(int(times)) for case in data["cases"]]
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(data, handle)


def dagster_failed(run_id: str, timeout_s: str) -> None:
    """The Dagster run of evaluation run ``run_id`` ends FAILURE (run monitoring) within ``timeout_s``."""
    import dagster as dg  # noqa: PLC0415 - only this command needs the project's environment
    import sqlalchemy as sa  # noqa: PLC0415

    from rag_pipeline.storage.engine import get_engine  # noqa: PLC0415

    with get_engine().connect() as conn:
        dagster_run = conn.execute(sa.text("SELECT dagster_run_id FROM retrieval_evaluation_runs WHERE id = :id"),
                                   {"id": run_id}).scalar_one()
    deadline = time.monotonic() + float(timeout_s)
    with dg.DagsterInstance.get() as instance:
        while (status := instance.get_run_by_id(dagster_run).status) != dg.DagsterRunStatus.FAILURE:
            if time.monotonic() > deadline:
                fail(f"Dagster run {dagster_run} is {status.value} after {timeout_s}s, not failed by run monitoring")
            time.sleep(2)
    print(f"   Dagster run {dagster_run}: FAILURE (run monitoring)")


def dagster_runs() -> None:
    """The newest Dagster runs of the instance: job, status, worker and launcher tags (a failure's diagnosis)."""
    import dagster as dg  # noqa: PLC0415 - only this command needs the project's environment

    with dg.DagsterInstance.get() as instance:
        for run in instance.get_runs(limit=30):
            tags = {k: v for k, v in run.tags.items() if k.startswith(("rag/", "dagster-celery", "dagster/partition"))}
            print(f"   {run.run_id[:8]} {run.job_name:<22} {run.status.value:<10} {json.dumps(tags)}")


if __name__ == "__main__":
    COMMANDS = {"evaluate": evaluate, "wait": wait, "running": running, "results": results, "same": same,
                "check": check, "first": first, "ids": ids, "longer": longer, "dagster-failed": dagster_failed,
                "dagster-runs": dagster_runs}
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        fail(f"usage: smoke_api.py {{{','.join(COMMANDS)}}} ARGS...")
    COMMANDS[sys.argv[1]](*sys.argv[2:])
