"""``rag-pipeline db start|stop|status|url|psql`` and ``rag-pipeline demo`` (the main job, through Dagster)."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from rag_pipeline.cli.errors import error, guarded
from rag_pipeline.contracts.errors import EXIT_USER_ERROR
from rag_pipeline.settings import DAGSTER_DATABASE, KB_DATABASE, get_settings, pgdata_dir, project_root
from rag_pipeline.storage import embedded_server
from rag_pipeline.storage.engine import dagster_database_url, database_url, get_engine
from rag_pipeline.storage.files import write_atomic
from rag_pipeline.storage.urls import libpq_url, mask_url


@guarded()
def cmd_db(args: argparse.Namespace) -> int:
    if args.psql_args and args.action != "psql":
        error(f"db {args.action}: unexpected argument(s) {' '.join(args.psql_args)} (only `db psql -- ARGS` takes "
              "psql arguments)")
        return EXIT_USER_ERROR
    if args.action == "stop":
        print("stopped" if embedded_server.stop() else f"not running ({pgdata_dir()})")
        return 0
    if (args.listen and args.action != "start") or (args.show_password and args.action != "url"):
        error(f"db {args.action}: --listen goes with `db start`, --show-password with `db url`")
        return EXIT_USER_ERROR
    if args.action == "password":
        return _print_password()
    if args.action == "url":
        url = _shared_url(dagster=args.dagster)
        if not args.libpq:
            print(url if args.show_password else mask_url(url))
            return 0
        uri, password = libpq_url(url)
        print(uri)
        if password is not None:
            print("rag-pipeline: note: the password is left out; psql asks for it (or set PGPASSWORD, use "
                  "~/.pgpass, or run `rag-pipeline db psql`)", file=sys.stderr)
        return 0
    if args.action == "psql":
        return _exec_psql(database_url() if not args.dagster else dagster_database_url(), args.psql_args)
    if args.action == "status":
        external = get_settings().database_url
        tcp = None if external else embedded_server.listener_url(KB_DATABASE)
        print(f"RAG_DATABASE_URL {mask_url(external)}" if external else
              f"embedded {'running' if embedded_server.is_running() else 'stopped'} in {pgdata_dir()}"
              + (f", TCP {mask_url(tcp)}" if tcp else ""))
        return 0
    # start: server, databases, migrations, and the .env Dagster reads from the repo root
    if args.listen:
        if get_settings().database_url:
            error("db start --listen starts the embedded server, but RAG_DATABASE_URL is set (another server): "
                  "unset it")
            return EXIT_USER_ERROR
        embedded_server.start(listen=args.listen)
    get_engine()
    before = embedded_server.env_written_for(project_root())
    env_file, lines = write_env_file()
    _prepare_dagster_instance(lines)
    names = ", ".join(line.split("=", 1)[0] for line in lines)
    if before and not get_settings().database_url and before[0] != pgdata_dir().resolve():
        names += f"; it was written for the embedded PostgreSQL in {before[0]}, now for {pgdata_dir()}"
    tcp = "" if get_settings().database_url else embedded_server.listener_url(KB_DATABASE)
    print(f"database ready: {mask_url(database_url())}\nwrote {env_file} ({names})"
          + (f"\nlistening on {mask_url(tcp)} (`rag-pipeline db password` prints the password)" if tcp else ""))
    return 0


def _shared_url(*, dagster: bool) -> str:
    """The URL to give another process: the embedded server's TCP listener when it has one, else the usual one."""
    if not get_settings().database_url:
        database_url()  # the server runs, its databases exist
        tcp = embedded_server.listener_url(DAGSTER_DATABASE if dagster else KB_DATABASE,
                                           "psycopg2" if dagster else "psycopg")
        if tcp:
            return tcp
    return dagster_database_url(create=False) if dagster else database_url()


def _print_password() -> int:
    """``db password``: print the database password (of RAG_DATABASE_URL, else of the embedded server)."""
    explicit = get_settings().database_url
    url = explicit or embedded_server.listener_url(KB_DATABASE)
    password = libpq_url(url)[1] if url else None
    if password is None:
        error("no database password: RAG_DATABASE_URL has none" if explicit else
              f"no database password: the embedded server in {pgdata_dir()} listens on no TCP (start it with "
              "`rag-pipeline db start --listen 127.0.0.1:5433`)")
        return EXIT_USER_ERROR
    print(password)
    return 0


def _exec_psql(url: str, extra: list[str]) -> int:
    """Replace this process with ``psql <libpq URI>``; the password travels as PGPASSWORD, never as an argument."""
    uri, password = libpq_url(url)
    psql = shutil.which("psql") or embedded_server.bundled_binary("psql")
    if not psql:
        raise OSError("psql not found: install the PostgreSQL client (e.g. apt-get install postgresql-client), or "
                      "connect with `rag-pipeline db url --libpq`")
    env = dict(os.environ)
    if password is not None:
        env["PGPASSWORD"] = password
    sys.stdout.flush()
    os.execve(psql, [psql, uri, *(a for a in extra if a != "--")], env)
    return 0  # pragma: no cover - execve does not return


def write_env_file() -> tuple[Path, list[str]]:
    """Write ``<project>/.env`` (mode 0600): DAGSTER_HOME, Dagster's storage URL, RAG_PGDATA when it is set, and
    (the embedded server listening on TCP) both URLs with its password, so Dagster and other hosts use TCP."""
    env_file = project_root() / ".env"
    tcp = None if get_settings().database_url else embedded_server.listener_url(KB_DATABASE)
    dagster_url = dagster_database_url()  # creates the database on the embedded server
    if tcp:
        dagster_url = embedded_server.listener_url(DAGSTER_DATABASE, "psycopg2") or dagster_url
    lines = [f"DAGSTER_HOME={project_root()}", f"RAG_DAGSTER_PG_URL={dagster_url}"]
    if tcp:
        lines.append(f"RAG_DATABASE_URL={tcp}")
    if get_settings().pgdata:
        lines.append(f"RAG_PGDATA={pgdata_dir()}")
    # 0600, never readable by others, not even briefly: it may hold a database password (RAG_DATABASE_URL with one)
    write_atomic(env_file, "\n".join(lines) + "\n", mode=0o600)
    return env_file, lines


def announce_boot(pgdata: Path) -> None:
    """A command started the embedded server: say so, and for the project's own server write ``.env``."""
    note = ""
    if pgdata.resolve() == (project_root() / ".rag_pipeline" / "pgdata").resolve() and not get_settings().database_url:
        env_file, _ = write_env_file()
        note = f"; wrote {env_file}"
    print(f"rag-pipeline: started the embedded PostgreSQL in {pgdata} (it keeps running; stop it with "
          f"`rag-pipeline db stop`){note}", file=sys.stderr)


def _prepare_dagster_instance(env_lines: list[str]) -> None:
    """:mod:`rag_pipeline.defs.instance` in a child process: the CLI itself never imports Dagster."""
    env = {**os.environ, **dict(line.split("=", 1) for line in env_lines)}
    proc = subprocess.run([sys.executable, "-m", "rag_pipeline.defs.instance"], env=env, capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines() or ["no output"]
        raise RuntimeError(f"could not prepare Dagster's instance storage: {lines[-1]}")


@guarded()
def cmd_demo(args: argparse.Namespace) -> int:
    """Runs :mod:`rag_pipeline.defs.demo` (Dagster) in a child process with the same arguments."""
    argv = [sys.executable, "-m", "rag_pipeline.defs.demo"]
    for version in args.strategy or []:
        argv += ["--strategy", version]
    if args.output_dir:
        argv += ["--output-dir", args.output_dir]
    return subprocess.run(argv, check=False).returncode


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("db", description="Embedded PostgreSQL. `start --listen HOST:PORT` also listens on TCP with a "
                                   "generated password (scram-sha-256; .env then holds both URLs). `url` prints the "
                                   "SQLAlchemy URL (the TCP one when listening; password masked unless "
                                   "--show-password); `url --libpq` a URI psql accepts (unix-socket host included, "
                                   "password left out); `psql [-- ARGS]` runs psql on the database (password as "
                                   "PGPASSWORD); `password` prints the password.")
    p.add_argument("action", choices=["start", "stop", "status", "url", "psql", "password"])
    p.add_argument("--listen", metavar="HOST:PORT", help="with start: also listen on TCP there (e.g. "
                   "127.0.0.1:5433), password required; remembered for later starts of the same data directory")
    p.add_argument("--show-password", action="store_true", help="with url: print the password too")
    p.add_argument("--dagster", action="store_true", help="with url/psql: Dagster's storage database")
    p.add_argument("--libpq", action="store_true",
                   help="with url: a plain postgresql:// URI for psql/pg_dump (no driver suffix, no password)")
    p.add_argument("psql_args", nargs="*", metavar="PSQL_ARG", help="with psql: arguments for psql, after -- "
                   "(e.g. db psql -- -c '\\dt')")
    p.set_defaults(func=cmd_db)

    p = sub.add_parser("demo")
    p.add_argument("--strategy", action="append", help="only these strategy versions (repeatable; default all)")
    p.add_argument("--output-dir", help="where the JSON reports go (default reports/)")
    p.set_defaults(func=cmd_demo)
