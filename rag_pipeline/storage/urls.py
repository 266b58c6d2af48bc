"""Database URLs: driver schemes, database names, and masking passwords for logs and messages."""

from __future__ import annotations

import re
from urllib.parse import quote, urlsplit, urlunsplit

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from rag_pipeline.contracts.errors import BadInputError


class DatabaseError(BadInputError, RuntimeError):
    """The database cannot be reached or prepared; the message is meant for the user (password masked)."""


# The password runs to the *last* '@' (greedy): an unencoded '@' in a password must not leave its tail visible.
_PASSWORD = re.compile(r"(?P<head>[a-z0-9+]+://[^:/@?]*:)(?P<pw>.*)(?P<tail>@)", re.IGNORECASE)
_PASSWORD_PARAM = re.compile(r"(?P<head>[?&]password=)(?P<pw>[^&]*)", re.IGNORECASE)
# libpq key=value strings (``host=h user=alice password=S3cret``, ``password='a b'`` with libpq's ``\'``
# escapes) and environment-style assignments (``PGPASSWORD=...``, ``DB_PASSWORD="..."``): any word ending in
# ``password`` followed by ``=``. A URL's ``?password=`` / ``&password=`` is left to :data:`_PASSWORD_PARAM`.
_PASSWORD_KEYWORD = re.compile(
    r"(?<![?&])(?P<head>\b\w*password\s*=\s*)(?P<pw>'(?:[^'\\]|\\.)*'?|\"(?:[^\"\\]|\\.)*\"?|[^\s'\"]+)", re.IGNORECASE)
_URL = re.compile(r"[a-z0-9+]+://\S+", re.IGNORECASE)


def _mask_keywords(text: str) -> str:
    return _PASSWORD_KEYWORD.sub(lambda m: m["head"] + "***", text)


def mask_url(url: str) -> str:
    """Hide the password of a database URL (for logs, metadata and error messages); a libpq ``key=value``
    connection string gets its ``password=`` value hidden."""
    url = str(url)
    if "://" not in url:
        return _mask_keywords(url)
    masked = _PASSWORD.sub(lambda m: m["head"] + ("***" if m["pw"] else "") + m["tail"], url)
    return _PASSWORD_PARAM.sub(lambda m: m["head"] + "***", masked)


def mask_secrets(text: object) -> str:
    """Mask every password inside a free-form message: in URLs (``user:pw@``, ``?password=``), libpq
    ``key=value`` strings and ``PGPASSWORD=pw``-style assignments."""
    return _mask_keywords(_URL.sub(lambda m: mask_url(m.group(0)), str(text)))


def with_driver(url: str, driver: str) -> str:
    try:
        parts = urlsplit(url)
        scheme = parts.scheme.split("+")[0]
        if scheme not in ("postgresql", "postgres"):
            raise DatabaseError(f"not a PostgreSQL URL: {mask_secrets(url)}")
        result = urlunsplit(parts._replace(scheme=f"postgresql+{driver}"))
        parsed = make_url(result)  # SQLAlchemy's own parsing (port, query) fails here, not later with a traceback
        if "@" in (parsed.host or ""):  # the driver's "cannot resolve host" message would show the password's tail
            raise ValueError("an '@' in the user name or password must be written %40")
    except (ValueError, sa.exc.ArgumentError) as exc:
        raise DatabaseError(f"invalid database URL {mask_secrets(url)}: {mask_secrets(str(exc))}") from None
    return result


def with_database(url: str, database: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + database))


def normalize_url(url: str) -> str:
    """Any PostgreSQL URL (``postgres://``, ``postgresql://``, ``postgresql+psycopg2://``...) with psycopg 3."""
    return with_driver(url, "psycopg")


# Connection parameters libpq (psql, pg_dump) accepts in a URI's query string; anything else (a SQLAlchemy or
# driver option) would make psql fail with ``invalid URI query parameter``.
LIBPQ_PARAMETERS = frozenset({
    "host", "hostaddr", "port", "dbname", "user", "passfile", "channel_binding", "connect_timeout",
    "client_encoding", "options", "application_name", "fallback_application_name", "keepalives",
    "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout", "replication", "gssencmode",
    "sslmode", "requiressl", "sslcompression", "sslcert", "sslkey", "sslpassword", "sslcertmode", "sslrootcert",
    "sslcrl", "sslcrldir", "sslsni", "requirepeer", "ssl_min_protocol_version", "ssl_max_protocol_version",
    "krbsrvname", "gsslib", "gssdelegation", "service", "target_session_attrs", "load_balance_hosts",
    "sslnegotiation", "require_auth", "min_protocol_version", "max_protocol_version"})


def libpq_url(url: str) -> tuple[str, str | None]:
    """``(URI psql accepts, password)`` of a database URL: ``postgresql://`` without driver or password (pass
    it as ``PGPASSWORD``), only libpq's query parameters kept."""
    parsed = make_url(with_driver(url, "psycopg"))
    password = parsed.password

    def q(text: object, safe: str = "") -> str:
        return quote(str(text), safe=safe)  # percent-encoding only: libpq reads '+' as '+'

    user = q(parsed.username) + "@" if parsed.username else ""
    host = q(parsed.host) if parsed.host else ""
    port = f":{parsed.port}" if parsed.port else ""
    params = [f"{key}={q(v, safe='/')}" for key, value in parsed.query.items() if key in LIBPQ_PARAMETERS
              for v in (value if isinstance(value, tuple) else (value,))]
    uri = f"postgresql://{user}{host}{port}/{q(parsed.database or '')}" + ("?" + "&".join(params) if params else "")
    return uri, (str(password) if password else None)
