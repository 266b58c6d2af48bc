"""Hostile JSON bodies on ``POST /knowledge-bases/{id}/answer-runs``: a body nested 100,000 deep, a duplicate key
(at the top or inside an answer line), a non-finite number and bytes that are not UTF-8 are each a 422 naming the
problem (the key and where it is), never a 500 and never the last of two keys kept silently; nothing is stored."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from rag_pipeline_tests.web.inprocess.conftest import covers

API = "/api/v1"


def _runs(engine) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT count(*) FROM answer_runs")).scalar_one()


def _line(case: dict) -> str:
    return json.dumps({"case_id": case["case_id"], "answer": "an answer"})


DEEP = 100_000


@pytest.mark.parametrize(("body", "expected"), [
    pytest.param(lambda _c: b'{"dataset": "inproc", "answers": ' + b"[" * DEEP + b"]" * DEEP + b"}",
                 "the request body is not JSON we can read: JSON is nested too deeply", id="deep"),
    pytest.param(lambda c: ('{"dataset": "inproc", "dataset": "other", "answers": [' + _line(c) + "]}").encode(),
                 "the request body: dataset: appears more than once in this object", id="duplicate-top-key"),
    pytest.param(lambda c: ('{"dataset": "inproc", "answers": [{"case_id": "' + c["case_id"]
                            + '", "answer": "wrong", "answer": "right"}]}').encode(),
                 "the request body: answers[0].answer: appears more than once in this object",
                 id="duplicate-key-in-a-line"),
    pytest.param(lambda c: ('{"dataset": "inproc", "answers": [{"case_id": "' + c["case_id"]
                            + '", "answer": "x", "latency_ms": NaN}]}').encode(),
                 "the request body: answers[0].latency_ms: non-finite number NaN is not JSON", id="nan"),
    pytest.param(lambda _c: b'{"dataset": "inproc", "answers": [{"answer": "\xff"}]}',
                 "the request body is not UTF-8 (byte 0xff at offset 46)", id="not-utf8"),
    pytest.param(lambda _c: b'{"dataset": "inproc", "answers": [' + b"9" * 5000 + b"]}",
                 "the request body is not JSON we can read: invalid JSON: a number has more than 4300 digits",
                 id="huge-integer"),
])
@covers("POST /api/v1/knowledge-bases/{id}/answer-runs")
def test_a_hostile_json_body_is_a_422_naming_the_problem(client, engine, evaluated, body, expected):
    before = _runs(engine)
    resp = client.post(f"{API}/knowledge-bases/{evaluated['kb']}/answer-runs", content=body(evaluated["cases"][0]),
                       headers={"content-type": "application/json"})
    assert resp.status_code == 422, resp.text[:500]
    assert resp.json()["detail"] == expected
    assert "sys." not in resp.text and "Traceback" not in resp.text
    assert _runs(engine) == before
