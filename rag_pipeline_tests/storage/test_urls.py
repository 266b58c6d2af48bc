"""mask_url / mask_secrets (rag_pipeline.storage.urls): database passwords never reach logs, metadata or error messages."""

from __future__ import annotations

import pytest

from rag_pipeline.storage.urls import mask_secrets, mask_url


@pytest.mark.parametrize(
    ("url", "secret", "masked"),
    [
        ("postgresql://user:pw@host/db", "pw", "postgresql://user:***@host/db"),
        ("postgresql+psycopg://rag:s3cr%40t@db.example:5432/rag", "s3cr%40t",
         "postgresql+psycopg://rag:***@db.example:5432/rag"),
        ("postgresql+psycopg2://dagster:a:b/c@h/dagster", "a:b/c", "postgresql+psycopg2://dagster:***@h/dagster"),
        ("postgres://u@h/d?password=hunter2", "hunter2", "postgres://u@h/d?password=***"),
        ("postgresql://u@h/d?sslmode=require&password=hunter2&x=1", "hunter2",
         "postgresql://u@h/d?sslmode=require&password=***&x=1"),
        ("POSTGRESQL://U:PW@H/D", "PW", "POSTGRESQL://U:***@H/D"),
    ],
)
def test_mask_url_hides_password(url: str, secret: str, masked: str) -> None:
    out = mask_url(url)
    assert out == masked
    assert secret not in out


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://user@host/db",
        "postgresql:///rag?host=/tmp/rag_socket",
        "postgresql+psycopg://embedded_postgres@/rag?host=%2Ftmp%2Fpg",
        "postgresql://h:5432/d",
    ],
)
def test_mask_url_leaves_passwordless_urls_intact(url: str) -> None:
    assert mask_url(url) == url


def test_mask_secrets_masks_every_url_in_a_message() -> None:
    msg = ("cannot reach postgresql://rag:topsecret@db1/rag: connection refused; "
           "dagster storage \"postgresql+psycopg2://dg:other-pw@db2:5432/dagster?password=third\" failed")
    out = mask_secrets(msg)
    for secret in ("topsecret", "other-pw", "third"):
        assert secret not in out
    assert "postgresql://rag:***@db1/rag:" in out
    assert "postgresql+psycopg2://dg:***@db2:5432/dagster?password=***" in out
    assert out.startswith("cannot reach ") and out.endswith(" failed")


def test_mask_secrets_leaves_plain_text_and_passwordless_urls() -> None:
    msg = "no such table knowledge_bases on postgresql://rag@localhost/rag (password not needed)"
    assert mask_secrets(msg) == msg
