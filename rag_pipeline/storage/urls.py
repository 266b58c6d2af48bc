"""Database URLs: driver schemes, database names, and masking passwords for logs and messages."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

import sqlalchemy as sa
from sqlalchemy.engine import make_url


class DatabaseError(RuntimeError):
    """The database cannot be reached or prepared; the message is meant for the user (password masked)."""


# The password runs to the *last* '@' (greedy): an unencoded '@' in a password must not leave its tail visible.
_PASSWORD = re.compile(r"(?P<head>[a-z0-9+]+://[^:/@?]*:)(?P<pw>.*)(?P<tail>@)", re.IGNORECASE)
_PASSWORD_PARAM = re.compile(r"(?P<head>[?&]password=)(?P<pw>[^&]*)", re.IGNORECASE)
# libpq key=value strings (``host=h user=alice password=S3cret``, ``password='a b'`` with libpq's ``\'``
# escapes) and environment-style assignments (``PGPASSWORD=...``, ``DB_PASSWORD="..."``): any word ending in
# ``password`` followed by ``=``. A URL's ``?password=`` / ``&password=`` is left to :data:`_PASSWORD_PARAM`.
_PASSWORD_KEYWORD = re.compile(
    r"(?<![?&])(?P<head>\b\w*password\s*=\s*)(?P<pw>'(?:[^'\\]|\\.)*'?|\"(?:[^\"\\]|\\.)*\"?|[^\s'\"]+)",
    re.IGNORECASE)
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


def mask_secrets(text: str) -> str:
    """Mask every password inside a free-form message, in every form a connection string takes: URLs
    (``user:pw@``, ``?password=``), libpq ``key=value`` strings (``password=pw``, ``password='a b'``) and
    ``PGPASSWORD=pw``-style assignments."""
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
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + database))


def normalize_url(url: str) -> str:
    """Any PostgreSQL URL (``postgres://``, ``postgresql://``, ``postgresql+psycopg2://``...) with the psycopg 3 driver."""
    return with_driver(url, "psycopg")
