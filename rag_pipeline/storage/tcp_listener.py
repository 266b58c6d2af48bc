"""The embedded server on TCP with a password: the address it listens on, its generated password, its
``pg_hba.conf`` (docs/scaling.md §"A TCP server with a password").

``db start --listen HOST:PORT`` records the address and a generated password in ``<pgdata>/rag_listen.json``
(mode 0600, written once) so later boots reuse them. TCP connections need the password (``scram-sha-256``); the
unix socket in the data directory stays ``trust`` for the server's OS user, as the local CLI connects."""

from __future__ import annotations

import json
import re
import secrets
import shlex
from pathlib import Path

from rag_pipeline.storage.files import write_atomic
from rag_pipeline.storage.urls import DatabaseError

LISTEN_FILE = "rag_listen.json"
SUPERUSER = "postgres"

PG_HBA = """\
# Written by `rag-pipeline db start --listen` (docs/scaling.md): the unix socket (in the data directory, mode 0700)
# trusts the server's OS user; every TCP connection needs the password (SCRAM).
local all all trust
host all all 0.0.0.0/0 scram-sha-256
host all all ::/0 scram-sha-256
"""

_LISTEN = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.*-]+):(?P<port>[0-9]{1,5})")
_WILDCARDS = ("0.0.0.0", "*", "::")


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:5433`` for IPv6) → ``(host, port)``; a clear error otherwise."""
    match = _LISTEN.fullmatch(value.strip())
    port = int(match["port"]) if match else 0
    if not match or not 1 <= port <= 65535:
        raise DatabaseError(f"--listen must be HOST:PORT with a port 1-65535 (e.g. 127.0.0.1:5433), got {value!r}")
    return match["host"].strip("[]"), port


def saved(pgdata: Path) -> dict[str, str] | None:
    """The recorded ``{"listen", "password"}`` of this data directory, or None (socket only)."""
    path = Path(pgdata) / LISTEN_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        parse_listen(data["listen"])
        if not isinstance(data["password"], str) or not data["password"]:
            raise ValueError("no password")
    except (ValueError, KeyError, TypeError) as exc:
        raise DatabaseError(f"{path}: unreadable TCP settings ({exc}); delete it and run "
                            "`rag-pipeline db start --listen HOST:PORT` again") from None
    return data


def record(pgdata: Path, listen: str) -> dict[str, str]:
    """Record ``listen`` for this data directory, keeping an existing password (else a new one), mode 0600."""
    host, port = parse_listen(listen)
    previous = saved(pgdata)
    data = {"listen": f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
            "password": previous["password"] if previous else secrets.token_urlsafe(24)}
    write_atomic(Path(pgdata) / LISTEN_FILE, json.dumps(data), mode=0o600)
    return data


def configure(conn, pgdata: Path, password: str) -> None:
    """On a psycopg connection of the superuser (socket): SCRAM password, ``password_encryption``, pg_hba.conf.
    Takes effect at the next (re)start."""
    from psycopg import sql  # noqa: PLC0415

    conn.execute("ALTER SYSTEM SET password_encryption = 'scram-sha-256'")
    conn.execute("SET password_encryption = 'scram-sha-256'")  # this session hashes the password with SCRAM
    conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(SUPERUSER), sql.Literal(password)))
    (Path(pgdata) / "pg_hba.conf").write_text(PG_HBA, encoding="utf-8")


def client_url(settings: dict[str, str], database: str, driver: str = "psycopg") -> str:
    """The URL a client uses to reach the listener: ``postgresql+DRIVER://postgres:PASSWORD@HOST:PORT/DATABASE``
    (a wildcard address is reached on 127.0.0.1)."""
    host, port = parse_listen(settings["listen"])
    host = "127.0.0.1" if host in _WILDCARDS else host
    host = f"[{host}]" if ":" in host else host
    return f"postgresql+{driver}://{SUPERUSER}:{settings['password']}@{host}:{port}/{database}"


def server_options(settings: dict[str, str], socket_dir: Path) -> str:
    """``postgres`` command-line options: listen on the recorded address and keep the unix socket."""
    host, port = parse_listen(settings["listen"])
    return f"-h {shlex.quote(host)} -p {port} -k {shlex.quote(str(socket_dir))}"
