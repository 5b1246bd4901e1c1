"""A PostgreSQL server for the store tests: the one ``DIAL_TEST_POSTGRES_URL`` names, else a throwaway cluster.

The throwaway cluster is made with ``initdb`` in a temporary directory and started with ``pg_ctl``; it listens on a
Unix socket in that directory only (no TCP port to collide with), trusts local connections, and is stopped and
removed when the session ends. PostgreSQL refuses to run as root, so as root it runs as the ``postgres`` user.
Without a server the tests that need one fail, saying why: they are never skipped.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shlex
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import psycopg
import pytest

ENV = "DIAL_TEST_POSTGRES_URL"
USER = "postgres"


def _pg_bin() -> Path | None:
    """The directory of ``pg_ctl``: on ``PATH``, else the newest Debian install under /usr/lib/postgresql."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    installed = [Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/pg_ctl")]
    installed.sort(key=lambda folder: int(folder.parent.name) if folder.parent.name.isdigit() else 0)
    return installed[-1] if installed else None


def _as_user(command: list[str]) -> list[str]:
    """``command`` run as the ``postgres`` user when we are root."""
    if os.geteuid() != 0:
        return command
    if shutil.which("runuser"):
        return ["runuser", "-u", USER, "--", *command]
    return ["su", USER, "-s", "/bin/sh", "-c", shlex.join(command)]


def _run(command: list[str], cwd: Path) -> None:
    done = subprocess.run(_as_user(command), cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        log = cwd / "server.log"
        detail = log.read_text() if log.exists() else ""
        pytest.fail(f"{shlex.join(command)} failed:\n{done.stdout}{done.stderr}{detail}", pytrace=False)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A libpq URL of a PostgreSQL database the tests may create (and drop) schemas in."""
    with server() as url:
        yield url


@pytest.fixture
def pg_schema_url(postgres_url: str) -> Iterator[str]:
    """The server's URL with a fresh schema first on the ``search_path``: each test gets its own ``dial_log``."""
    schema = f"test_{uuid.uuid4().hex}"
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(f"CREATE SCHEMA {schema}")
    yield f"{postgres_url}{'&' if '?' in postgres_url else '?'}{urlencode({'options': f'-csearch_path={schema}'})}"
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(f"DROP SCHEMA {schema} CASCADE")


@contextlib.contextmanager
def server(*, fsync: bool = False) -> Iterator[str]:
    """The URL of the server ``DIAL_TEST_POSTGRES_URL`` names, else of a throwaway cluster for the block's length
    (``fsync``: whether it syncs its commits to disk)."""
    given = os.environ.get(ENV)
    if given:
        yield given
        return
    folder = _pg_bin()
    if folder is None:
        pytest.fail(
            f"the PostgreSQL tests need a server: set {ENV} to its URL, or install PostgreSQL "
            "(bash .ci/postgres.sh) so that a throwaway cluster can be started",
            pytrace=False,
        )
    owner = None
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam(USER)
        except KeyError:
            pytest.fail(f"running as root, and there is no {USER!r} user to run PostgreSQL as", pytrace=False)
    root = Path(tempfile.mkdtemp(prefix="dial-pg-"))
    data, log, pg_ctl = str(root / "data"), str(root / "server.log"), str(folder / "pg_ctl")
    started = False
    try:
        if owner is not None:
            os.chown(root, owner.pw_uid, owner.pw_gid)
        _run([str(folder / "initdb"), "-D", data, "-U", USER, "-A", "trust", "-E", "UTF8", "--no-sync"], root)
        options = f"-c listen_addresses='' -k {root} -c fsync={'on' if fsync else 'off'}"
        _run([pg_ctl, "-D", data, "-l", log, "-w", "-o", options, "start"], root)
        started = True
        yield f"postgresql:///postgres?host={root}&user={USER}"
    finally:
        if started:
            _run([pg_ctl, "-D", data, "-m", "immediate", "-w", "stop"], root)
        shutil.rmtree(root, ignore_errors=True)
