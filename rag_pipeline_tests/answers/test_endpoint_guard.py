"""The HTTP API's endpoint guard: which URLs and addresses it refuses, and that the connection goes to the
address it checked. Refused addresses are only resolved (numeric forms, no packet leaves the machine); every
connection made is to a real server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

from rag_pipeline.answers.collection.endpoint_client import EndpointClient
from rag_pipeline.contracts.answers import EndpointConfig
from rag_pipeline.storage.http import guard as endpoint_guard
from rag_pipeline.storage.http.guard import EndpointGuard, EndpointRefusedError, allowed_variables
from rag_pipeline_tests.answers.rag_endpoint_server import RagEndpoint

NOT_PUBLIC = ["169.254.169.254", "[::ffff:169.254.169.254]", "0x7f000001", "2130706433", "127.0.0.1", "[::1]",
              "10.0.0.1", "172.16.5.4", "192.168.1.1", "100.64.0.1", "0.0.0.0", "[::]", "[fe80::1]", "[fc00::1]",
              "224.0.0.1", "240.0.0.1", "255.255.255.255", "[64:ff9b::a9fe:a9fe]", "[2002:a9fe:a9fe::1]", "localhost"]


@pytest.mark.parametrize("host", NOT_PUBLIC)
def test_a_non_public_address_is_refused_even_with_the_public_opt_in(host):
    guard = EndpointGuard(public=True)
    with pytest.raises(EndpointRefusedError, match="RAG_COLLECT_ENDPOINTS"):
        asyncio.run(guard.precheck(f"http://{host}:8080/latest/meta-data/"))


def test_a_named_host_is_refused_without_telling_its_address():
    with pytest.raises(EndpointRefusedError) as refused:
        asyncio.run(EndpointGuard(public=True).precheck("http://localhost:8080/x"))
    assert "127.0.0.1" not in str(refused.value) and "has an address that is not public" in str(refused.value)


def test_without_an_allow_list_every_endpoint_is_refused():
    for url in ("http://8.8.8.8/rag", "https://example.com/rag", "http://127.0.0.1:1/rag"):
        with pytest.raises(EndpointRefusedError, match="RAG_COLLECT_ENDPOINTS"):
            EndpointGuard().check_url(url)


def test_a_listed_base_holds_its_paths_and_origin_only():
    guard = EndpointGuard(["http://127.0.0.1:8081/rag"])
    guard.check_url("http://127.0.0.1:8081/rag")
    guard.check_url("http://127.0.0.1:8081/rag/v2?q={question}")
    for url in ("http://127.0.0.1:8081/ragx", "http://127.0.0.1:8081/rag/../admin", "https://127.0.0.1:8081/rag",
                "http://127.0.0.1:8082/rag", "http://localhost:8081/rag", "http://{question}/rag"):
        with pytest.raises(EndpointRefusedError):
            guard.check_url(url)


def test_allowed_variables_never_include_rag_settings():
    environ = {"RAG_API_TOKEN": "a", "rag_judge_api_key": "b", "MY_TOKEN": "c", "MY_OTHER": "d", "PATH": "/bin"}
    assert allowed_variables(["MY_TOKEN"], environ) == {"MY_TOKEN": "c"}
    assert allowed_variables(["MY_*"], environ) == {"MY_TOKEN": "c", "MY_OTHER": "d"}
    assert set(allowed_variables(["*"], environ)) == {"MY_TOKEN", "MY_OTHER", "PATH"}
    assert allowed_variables([], environ) == {}


class _Case:
    case_id, question, k = "c1", "What?", 3


def _ask(guard: EndpointGuard, url: str):
    async def go():
        async with EndpointClient(EndpointConfig(url=url, retries=2), guard=guard, quote_replies=False) as client:
            return await client.ask(_Case())
    return asyncio.run(go())


def test_the_connection_goes_to_the_checked_address_not_a_second_resolution(monkeypatch):
    """DNS rebinding: a name that resolves to an accepted address at the check and to the endpoint's 127.0.0.1
    afterwards. The guard resolves once and connects to the address it checked (127.0.0.2 stands for a public
    one, so no packet leaves the machine; nothing listens there), so the endpoint is never reached."""
    calls = []
    real = socket.getaddrinfo

    def rebinding(host, *args, **kwargs):
        if host == "rebind.test":
            calls.append(host)
            return real("127.0.0.2" if len(calls) == 1 else "127.0.0.1", *args, **kwargs)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    monkeypatch.setattr(endpoint_guard, "_public", lambda address: str(address) == "127.0.0.2")
    with RagEndpoint() as rag:
        port = rag.url.split(":")[2].split("/")[0]
        outcome = _ask(EndpointGuard(public=True), f"http://rebind.test:{port}/rag")
        assert sum(rag.requests.values()) == 0, "the endpoint on the rebound address was reached"
    # attempt 1 connected to the checked 127.0.0.2 (refused: nothing listens); attempt 2's connection resolved
    # again, got 127.0.0.1, and was refused before connecting
    assert calls == ["rebind.test", "rebind.test"] and outcome.requests == 2
    assert outcome.record.status == "error" and "not public" in outcome.record.error and outcome.unreachable
    monkeypatch.setattr(endpoint_guard, "_public", lambda address: False)
    calls.clear()
    refused = _ask(EndpointGuard(public=True), "http://rebind.test:1/rag")
    assert "not public" in refused.record.error and refused.unreachable and refused.requests == 1, "not retried"


def test_a_listed_endpoint_is_asked_and_a_refused_one_never(monkeypatch):
    with RagEndpoint() as rag:
        listed = _ask(EndpointGuard([rag.url]), rag.url)
        assert listed.record.status == "ok" and sum(rag.requests.values()) == 1
        other = _ask(EndpointGuard([rag.url]), rag.url.replace("127.0.0.1", "localhost"))
        assert other.record.status == "error" and "RAG_COLLECT_ENDPOINTS" in other.record.error
        assert sum(rag.requests.values()) == 1


def test_the_cli_client_is_not_guarded():
    async def go(url):
        async with EndpointClient(EndpointConfig(url=url, retries=0)) as client:
            return await client.ask(_Case())
    with RagEndpoint() as rag:
        assert asyncio.run(go(rag.url.replace("127.0.0.1", "localhost"))).record.status == "ok"


def test_an_unquoted_error_keeps_the_reply_out():
    with RagEndpoint(plan={"c1": ["500-echo"]}) as rag:
        outcome = _ask(EndpointGuard([rag.url]), rag.url)
    assert outcome.record.error == "HTTP 500" and outcome.record.raw_response is None
    assert isinstance(httpx.URL(rag.url).port, int)
