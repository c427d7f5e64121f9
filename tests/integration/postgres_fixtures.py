"""A throwaway PostgreSQL cluster (15 or later; postgres_server.py finds it) on a free port, for the session; one
database per test."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.conftest import free_port
from tests.integration.postgres_server import server_bin
from tests.waiting import eventually


def _as_postgres_user() -> list[str]:
    """PostgreSQL refuses to run as root; as root, run it as the `postgres` user."""
    if os.geteuid() != 0:
        return []
    return ["runuser", "-u", "postgres", "--"]


@pytest.fixture(scope="session")
def postgres_admin_url() -> Iterator[str]:
    try:
        pg_bin, missing = server_bin(), ""
    except LookupError as not_found:
        missing = str(not_found)
    if missing:  # outside the except block, so the failure is the message alone
        pytest.fail(missing, pytrace=False)
    root = Path(tempfile.mkdtemp(prefix="parity-pg-"))
    data, sockets = root / "data", root / "sockets"
    sockets.mkdir()
    if os.geteuid() == 0:
        postgres = pwd.getpwnam("postgres")
        for path in (root, sockets):
            os.chown(path, postgres.pw_uid, postgres.pw_gid)
    port = free_port()
    prefix = _as_postgres_user()
    subprocess.run(
        [
            *prefix,
            str(pg_bin / "initdb"),
            "-D",
            str(data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
            "-E",
            "UTF8",
        ],
        check=True,
        capture_output=True,
    )
    log_path = root / "postgres.log"
    with log_path.open("wb") as log_file:
        server = subprocess.Popen(
            [*prefix, str(pg_bin / "postgres"), "-D", str(data), "-p", str(port), "-k", str(sockets),
             "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200"],
            stdout=subprocess.DEVNULL, stderr=log_file,
        )  # fmt: skip
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"

    def accepting() -> bool:
        if server.poll() is not None:
            pytest.fail(f"postgres exited with {server.returncode}:\n{log_path.read_text()}")
        try:
            psycopg.connect(url, connect_timeout=1).close()
        except psycopg.OperationalError:
            return False
        return True

    eventually(accepting, timeout_s=60, interval_s=0.2,
               what=lambda: f"postgres accepting connections:\n{log_path.read_text()}\n")  # fmt: skip
    yield url
    server.terminate()
    try:
        server.wait(30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def fresh_postgres_url(postgres_admin_url: str) -> Iterator[str]:
    name = f"parity_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_admin_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    yield postgres_admin_url.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(postgres_admin_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
