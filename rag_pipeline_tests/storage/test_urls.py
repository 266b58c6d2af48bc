"""mask_url / mask_secrets (rag_pipeline.storage.urls): database passwords never reach logs, metadata or error
messages."""

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


@pytest.mark.parametrize(
    ("text", "secret", "masked"),
    [
        ("host=h user=alice password=S3cret dbname=rag", "S3cret", "host=h user=alice password=*** dbname=rag"),
        ("host=h password='a b' dbname=rag", "a b", "host=h password=*** dbname=rag"),
        ("host=h password='it\\'s a secret' dbname=rag", "secret", "host=h password=*** dbname=rag"),
        ("host=h password = S3cret port=5432", "S3cret", "host=h password = *** port=5432"),
        ("PASSWORD=S3cret host=h", "S3cret", "PASSWORD=*** host=h"),
        ("PGPASSWORD=S3cret rag-pipeline runs", "S3cret", "PGPASSWORD=*** rag-pipeline runs"),
        ('export APP_DB_PASSWORD="x y z"; next', "x y z", "export APP_DB_PASSWORD=***; next"),
        ("password='never closed", "never closed", "password=***"),
    ],
)
def test_mask_secrets_hides_libpq_and_environment_passwords(text: str, secret: str, masked: str) -> None:
    out = mask_secrets(text)
    assert out == masked
    assert secret not in out


def test_mask_url_hides_the_password_of_a_libpq_string() -> None:
    assert mask_url("host=h user=alice password=S3cret dbname=rag") == "host=h user=alice password=*** dbname=rag"


def test_mask_secrets_mixes_every_form_in_one_message() -> None:
    msg = ("tried postgresql://rag:one@db1/rag, then host=db2 password='two 2' dbname=rag "
           "with PGPASSWORD=three and postgres://u@h/d?password=four")
    out = mask_secrets(msg)
    for secret in ("one", "two 2", "three", "four"):
        assert secret not in out
    assert out == ("tried postgresql://rag:***@db1/rag, then host=db2 password=*** dbname=rag "
                   "with PGPASSWORD=*** and postgres://u@h/d?password=***")


@pytest.mark.slow  # the installed console script end to end in a subprocess
def test_a_libpq_database_url_is_refused_with_the_password_masked(tmp_path) -> None:
    """``RAG_DATABASE_URL`` must be a URL; a libpq key=value string is refused (exit 2) and never echoed."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "RAG_DATABASE_URL": "host=h user=alice password=S3cret dbname=rag"}
    proc = subprocess.run([str(Path(sys.executable).parent / "rag-pipeline"), "runs"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "S3cret" not in proc.stderr + proc.stdout
    assert proc.stderr.strip() == ("rag-pipeline: error: not a PostgreSQL URL: host=h user=alice password=*** "
                                   "dbname=rag")


@pytest.mark.parametrize(("kb", "dagster", "expected"), [
    ("postgresql://u:S3cretPw@h:5433/rag", "postgresql+psycopg2://u:S3cretPw@h:5433/rag",
     "RAG_DAGSTER_PG_URL names the knowledge-base database"),
    ("postgresql://u:S3cretPw@h:5433/dagster", None, "RAG_DATABASE_URL names the database 'dagster'"),
])
def test_dagster_storage_never_shares_the_knowledge_base_database(monkeypatch, kb, dagster, expected):
    """Both keep an Alembic ``alembic_version`` table: refused before anything connects."""
    from rag_pipeline.storage.engine import dagster_database_url
    from rag_pipeline.storage.urls import DatabaseError

    monkeypatch.setenv("RAG_DATABASE_URL", kb)
    if dagster:
        monkeypatch.setenv("RAG_DAGSTER_PG_URL", dagster)
    else:
        monkeypatch.delenv("RAG_DAGSTER_PG_URL", raising=False)
    with pytest.raises(DatabaseError, match=expected) as caught:
        dagster_database_url()
    assert "S3cretPw" not in str(caught.value)
