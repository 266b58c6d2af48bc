"""Hostile dataset bodies at the size limit: a bounded answer, a bounded server, nothing written.

A 50 MB file of ``[0,0,…]`` or ``{},{},…`` is refused by the streaming case limit before anything is decoded
(docs/design.md §2.2): through a real ``rag-pipeline serve`` (its RSS read from ``/proc``) and through the CLI as a
child process (its peak RSS from ``wait4``). The error lists at most 50 problems and says how many more.
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests

from rag_pipeline.evaluation.datasets.load import DatasetError, parse_dataset
from rag_pipeline.evaluation.datasets.strict_json import MAX_LISTED_PROBLEMS
from rag_pipeline.knowledge_base.lifecycle import ensure_knowledge_base
from rag_pipeline_tests.eval_helpers import table_counts
from rag_pipeline_tests.web.server_helpers import ROOT, dagster_env, start_server

pytestmark = pytest.mark.slow  # why: 50 MB bodies, a real server process and CLI child processes

SIZE = 50 * 1024 * 1024 - 1024
GROWTH_LIMIT = 250 * 1024 * 1024
HOSTILE = {"zeros": b"0,", "empty_objects": b"{},"}
TAG = uuid.uuid4().hex[:8]


def hostile_body(unit: bytes) -> bytes:
    """``[u,u,…,u]`` of about :data:`SIZE` bytes."""
    return b"[" + unit * ((SIZE - 2) // len(unit)) + unit.rstrip(b",") + b"]"


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in /proc/{pid}/status")


@pytest.fixture(scope="module")
def server(engine, tmp_path_factory):
    home = tmp_path_factory.mktemp("hostile_web")
    kb = f"hostile-{TAG}"
    with engine.begin() as conn:
        ensure_knowledge_base(conn, kb, "simple", 500, 50)
    with start_server(dagster_env(home / "dagster_home", home / "datasets"), log=home / "server.log") as (base,
                                                                                                        proc):
        yield base, proc.pid, kb


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_50_mb_hostile_upload_is_refused_fast_with_bounded_memory(engine, server, kind: str) -> None:
    base, pid, kb = server
    body = hostile_body(HOSTILE[kind])
    url = f"{base}/api/v1/knowledge-bases/{kb}/retrieval/datasets"
    requests.post(url, files={"file": ("warm.json", b"[0]")}, timeout=60)  # the route's imports are loaded
    before = table_counts(engine)
    rss_before = _status_kb(pid, "VmRSS")
    peak = rss_before
    started = time.monotonic()
    response = requests.post(url, files={"file": (f"{kind}.json", body)}, timeout=60)
    elapsed = time.monotonic() - started
    peak = max(peak, _status_kb(pid, "VmHWM"))
    assert response.status_code == 422, response.text[:500]
    assert elapsed <= 10, elapsed
    problem = response.json()
    assert len(response.content) < 20_000, len(response.content)
    (item,) = problem["errors"]
    assert item["field"] == "cases" and "more than 100000 cases" in item["message"], item
    assert peak - rss_before <= GROWTH_LIMIT, f"the server grew by {(peak - rss_before) / 2**20:.0f} MB"
    assert table_counts(engine) == before


@pytest.mark.parametrize("kind", HOSTILE)
def test_the_same_body_as_inline_json_is_refused_with_bounded_memory(engine, server, kind: str) -> None:
    base, pid, kb = server
    url = f"{base}/api/v1/knowledge-bases/{kb}/retrieval/datasets?name=hostile"
    before, rss_before = table_counts(engine), _status_kb(pid, "VmRSS")
    response = requests.post(url, data=hostile_body(HOSTILE[kind]), headers={"Content-Type": "application/json"},
                             timeout=60)
    assert response.status_code == 422, response.text[:500]
    assert "more than 100000 cases" in response.json()["detail"]
    assert _status_kb(pid, "VmHWM") - rss_before <= GROWTH_LIMIT
    assert table_counts(engine) == before


def _cli_peak(path: Path, tmp_path: Path) -> tuple[int, str, int]:
    """Run ``rag-pipeline evaluate --dataset path`` as a child: (exit code, stderr, peak RSS in bytes)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    err = tmp_path / f"{path.stem}.err"
    with err.open("wb") as stderr:
        command = [sys.executable, "-m", "rag_pipeline.cli", "evaluate",
                   "--dataset", str(path), "--knowledge-base", "kb"]
        proc = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=stderr)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, err.read_text(encoding="utf-8"), usage.ru_maxrss * 1024


@pytest.mark.parametrize("kind", HOSTILE)
def test_the_cli_refuses_a_50_mb_hostile_file_with_bounded_output_and_memory(engine, tmp_path: Path,
                                                                            kind: str) -> None:
    small = tmp_path / "small.json"
    small.write_bytes(b"[0]")
    _, _, baseline = _cli_peak(small, tmp_path)
    path = tmp_path / f"{kind}.json"
    path.write_bytes(hostile_body(HOSTILE[kind]))
    before = table_counts(engine)
    started = time.monotonic()
    rc, err, peak = _cli_peak(path, tmp_path)
    assert rc == 2, err[-2000:]
    assert time.monotonic() - started <= 30
    assert err.startswith("rag-pipeline: error: ") and "more than 100000 cases" in err, err[:500]
    assert len(err) < 5_000 and "MemoryError" not in err and "Traceback" not in err
    assert peak - baseline <= GROWTH_LIMIT, f"the CLI grew by {(peak - baseline) / 2**20:.0f} MB"
    assert table_counts(engine) == before


def test_many_bad_cases_list_the_first_50_and_count_the_rest() -> None:
    raw = b"[" + b"0," * 99_999 + b"0]"
    with pytest.raises(DatasetError) as info:
        parse_dataset(raw, source="zeros.json", knowledge_base="kb", name="zeros")
    err = info.value
    assert len(err.problems) == MAX_LISTED_PROBLEMS and err.more == 100_000 - MAX_LISTED_PROBLEMS
    lines = str(err).splitlines()
    assert lines[0] == "invalid dataset zeros.json: 100000 problems"
    assert lines[-1] == f"  ... and {100_000 - MAX_LISTED_PROBLEMS} more problems"
    assert len(lines) == MAX_LISTED_PROBLEMS + 2
    assert [p.case_index for p in err.problems] == list(range(MAX_LISTED_PROBLEMS))


def test_a_memory_bomb_inside_one_case_is_refused_before_decoding() -> None:
    raw = b'{"knowledge_base":"kb","cases":[{"case_id":"a","x":[' + b"[]," * (SIZE // 3 - 40) + b"[]]}]}"
    started = time.monotonic()
    with pytest.raises(DatasetError) as info:
        parse_dataset(raw, source="bomb.json", name="bomb")
    assert time.monotonic() - started <= 10
    (problem,) = info.value.problems
    assert problem.case_index == 0 and "MB in memory once decoded" in problem.message


U1 = "00000000-0000-0000-0000-000000000001"
SURROGATE_CASES = {  # the case, and the field as the problem names it (a lone surrogate shown as its escape)
    "case_id": ({"case_id": "id\udfff", "question": "q?", "relevant_chunk_ids": [U1], "k": 5}, "case_id",
                "id\\udfff"),
    "label_key": ({"case_id": "c1", "question": "q?", "relevant_chunk_ids": {f"{U1}\udfff": 1}, "k": 5},
                  f"relevant_chunk_ids.{U1}\\udfff", "c1"),
}


def _console_token(session: requests.Session, base: str, kb: str) -> str:
    page = session.get(f"{base}/admin/retrieval-evaluations/kb/{kb}", timeout=60).text
    return re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)


@pytest.mark.parametrize("where", SURROGATE_CASES)
def test_a_lone_surrogate_is_a_422_naming_the_field_on_every_front(engine, server, where: str) -> None:
    base, _pid, kb = server
    item, field, case_id = SURROGATE_CASES[where]
    body = json.dumps({"cases": [item]}).encode()  # json.dumps writes the lone surrogate as the escape \udfff
    before = table_counts(engine)
    upload = requests.post(f"{base}/api/v1/knowledge-bases/{kb}/retrieval/datasets",
                           files={"file": ("sur.json", body)}, timeout=60)
    assert upload.status_code == 422, upload.text[:500]
    assert [(e["field"], e["case_id"]) for e in upload.json()["errors"]] == [(field, case_id)]
    inline = requests.post(f"{base}/api/v1/knowledge-bases/{kb}/retrieval/evaluate", timeout=60,
                           data=json.dumps({"name": "sur", "cases": [item], "strategy_versions": ["keyword-v1"]}),
                           headers={"Content-Type": "application/json"})
    assert inline.status_code == 422, inline.text[:500]
    assert [e["field"] for e in inline.json()["errors"]] == [field]
    session = requests.Session()
    console = session.post(f"{base}/admin/retrieval-evaluations/kb/{kb}/upload", timeout=60,
                           data={"csrf_token": _console_token(session, base, kb)},
                           files={"dataset": ("sur.json", body, "application/json")})
    # refused: 303 to the page that lists the problems (Post/Redirect/Get), then that page
    assert [r.status_code for r in console.history] == [303] and console.status_code == 200
    assert 'id="upload-problems"' in console.text
    assert html.escape(field) in console.text
    assert table_counts(engine) == before


def test_inline_cases_with_a_repeated_key_are_refused_like_a_file(engine, server) -> None:
    base, _pid, kb = server
    text = ('{"name": "dup", "strategy_versions": ["keyword-v1"], "cases": [{"case_id": "a", "case_id": "b", '
            f'"question": "q?", "relevant_chunk_ids": ["{U1}"], "k": 5, "k": 6}}]}}')
    before = table_counts(engine)
    response = requests.post(f"{base}/api/v1/knowledge-bases/{kb}/retrieval/evaluate", data=text.encode(),
                             headers={"Content-Type": "application/json"}, timeout=60)
    assert response.status_code == 422, response.text[:500]
    errors = response.json()["errors"]
    assert {(e["case_index"], e["field"]) for e in errors} == {(0, "case_id"), (0, "k")}
    assert all("appears more than once in this case" in e["message"] for e in errors)
    file = requests.post(f"{base}/api/v1/knowledge-bases/{kb}/retrieval/datasets?name=dup", timeout=60,
                         data=json.dumps(json.loads(text)["cases"]).replace('"b"', '"b", "case_id": "a"').encode(),
                         headers={"Content-Type": "application/json"})
    assert file.status_code == 422  # the same refusal as an uploaded file
    assert table_counts(engine) == before
