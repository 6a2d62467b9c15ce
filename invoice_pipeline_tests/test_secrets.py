"""A database password never reaches Dagster's storage, its UI, a log or a file, and the
embedded server admits nobody without one."""

from __future__ import annotations

import json
import os
import secrets
import socket
import struct
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from invoice_pipeline.db.embedded import EmbeddedPostgres
from pipeline_support import secrets_scan
from pipeline_support.factories import json_invoice
from pipeline_support.helpers import free_port, run_cli, start_dev_server, stop_process_group

GRAPHQL_QUERIES = {
    "resources": """{ allTopLevelResourceDetailsOrError(repositorySelector: {repositoryLocationName: "invoice_pipeline",
        repositoryName: "__repository__"}) { ... on ResourceDetailsList { results { name configuredValues
        { key value type } } } } }""",
    "runs": "{ runsOrError { ... on Runs { results { runId jobName runConfigYaml tags { key value } } } } }",
    "jobs": """{ repositoriesOrError { ... on RepositoryConnection { nodes { jobs { name
        presets { runConfigYaml } } } } } }""",
}


@pytest.fixture
def password_role(server_url: str) -> Iterator[tuple[str, str]]:
    """A role with a random password and its own database; yields (password, url with it)."""
    role, password = f"sec_{secrets.token_hex(4)}", f"pw{secrets.token_hex(16)}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN CREATEDB PASSWORD {}").format(
                sql.Identifier(role), sql.Literal(password)
            )
        )
        conn.execute(
            sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(role), sql.Identifier(role))
        )
    parts = urlsplit(server_url)
    yield (
        password,
        urlunsplit(
            parts._replace(netloc=f"{role}:{password}@{parts.hostname}:{parts.port}", path=f"/{role}")
        ),
    )
    with psycopg.connect(server_url, autocommit=True) as conn:
        for db in (f"{role}_dagster", role):
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def _cli(env: dict[str, str], *args: str) -> str:
    done = run_cli(*args, env=env, timeout=300)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return done.stdout + done.stderr


def _graphql(port: int, query: str) -> str:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return str(response.read().decode())


def test_a_random_password_appears_nowhere(password_role: tuple[str, str], tmp_path: Path) -> None:
    password, url = password_role
    home = tmp_path / "home"
    env = dict(os.environ, INVOICE_PIPELINE_HOME=str(home), INVOICE_PIPELINE_DATABASE_URL=url)
    env.pop("DAGSTER_HOME", None)
    invoice = tmp_path / "invoice.json"
    invoice.write_bytes(json_invoice("SEC-1"))
    outputs = [
        _cli(env, "migrate"),
        _cli(env, "ingest", str(invoice)),
        _cli(env, "process"),
        _cli(env, "status"),
    ]
    port = free_port()
    proc = start_dev_server(env, port, home / "dev.log")
    try:
        assert proc.poll() is None, (home / "dev.log").read_text()[-2000:]
        answers = {name: _graphql(port, q) for name, q in GRAPHQL_QUERIES.items()}
    finally:
        stop_process_group(proc)
    assert (
        '"INVOICE_PIPELINE_DATABASE_URL"' in answers["resources"] and '"ENV_VAR"' in answers["resources"]
    ), "the UI shows the variable's name, as an EnvVar"
    assert "process_invoice_batch" in answers["runs"], "the CLI's run is in the storage that was searched"
    for name, answer in answers.items():
        assert password not in answer, f"GraphQL {name} answer shows the password"
    for text in outputs + [(home / "dev.log").read_text()]:
        assert password not in text, "a CLI or dagster dev log shows the password"
    files, scanned_files = secrets_scan.in_files(password, home)
    assert files == [] and scanned_files > 3, files
    dagster_url = urlunsplit(urlsplit(url)._replace(path=urlsplit(url).path + "_dagster"))
    places, scanned_values = secrets_scan.in_database(password, dagster_url)
    assert places == [] and scanned_values > 100, places


def _startup_without_password(port: int) -> bytes:
    """Speak the PostgreSQL startup protocol with the standard library only: the first reply."""
    body = struct.pack("!I", 196608) + b"user\0postgres\0database\0postgres\0\0"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(struct.pack("!I", len(body) + 4) + body)
        return sock.recv(64)


def test_embedded_server_admits_nobody_without_the_password(tmp_path: Path) -> None:
    home = tmp_path / "home"
    server = EmbeddedPostgres(home / "pgdata", free_port())
    server.start()
    try:
        reply = _startup_without_password(server.port)
        # 'R' + length + code: 0 would be "AuthenticationOk" (trust); 10 is SASL (scram-sha-256).
        assert reply[:1] == b"R" and struct.unpack("!I", reply[5:9])[0] == 10, reply
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(server.url("postgres"), passfile=os.devnull, connect_timeout=10)
        with psycopg.connect(server.url("postgres")) as conn:  # through PGPASSFILE
            assert conn.execute("SELECT current_user").fetchone() == ("postgres",)
        assert server.password_file.stat().st_mode & 0o777 == 0o600
        if os.geteuid() == 0:
            # Another OS user, with nothing but the standard library and the port.
            probe = (
                "import socket,struct,sys;b=struct.pack('!I',196608)+b'user\\0postgres\\0database\\0postgres\\0\\0';"
                f"s=socket.create_connection(('127.0.0.1',{server.port}));s.sendall(struct.pack('!I',len(b)+4)+b);"
                "r=s.recv(64);sys.stdout.write(str(struct.unpack('!I',r[5:9])[0]))"
            )
            done = subprocess.run(
                ["python3", "-c", probe], user="nobody", capture_output=True, text=True, timeout=30
            )
            assert done.stdout == "10", (done.stdout, done.stderr)
    finally:
        server.destroy()
