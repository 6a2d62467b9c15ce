"""Scenario 7, security checks.

* SQL injection strings in every text field of a JSON invoice (and in the org id and file
  name) are stored verbatim and do nothing: every table is still there, row counts add up.
* XXE (general and parameter entities, external DTD, UTF-16, inside a Factur-X attachment)
  never brings a local secret file's content into the database.
* `invoice-pipeline dev` (webserver, daemon, code server) and the embedded PostgreSQL listen on
  loopback only by default: every listening socket of their processes, read from /proc.
* A database password never leaks: with a role that has one, the password string must not
  appear in dagster.yaml, the Dagster home, the CLI's and `dagster dev`'s output, or the Dagster
  run storage; and the git tree holds no obvious secrets. The scenario arranges what that needs
  itself: the role (LOGIN CREATEDB PASSWORD, its own database) is created on the embedded
  PostgreSQL the scenario starts with `invoice-pipeline db start`, which admits nobody without
  a password (scram-sha-256), so it never depends on a server outside it. It used to use the
  machine's PostgreSQL at 127.0.0.1:5432 and, without one, record "skipped" and pass having
  checked nothing (issue 24). A check that cannot run now fails the scenario. What breaking
  it showed (2026-12-01, fast sizes): pointing the superuser connection at port 1 (no server,
  the old "skipped" case) failed the run with "password check could not run: no role with a
  password on the embedded server (connection failed: ... port 1 failed: Connection refused",
  and `password_check` stayed "not run"; adding the password to the collected CLI output
  failed it with "the database password appears in CLI or dagster dev output".
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from dagster import DagsterInstance
from psycopg import sql

from chaos.common import ChaosContext, ScenarioResult, check_common_invariants, timed
from chaos.worker import batch_run_config, resources
from invoice_pipeline.db.embedded import EmbeddedPostgres
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.orchestration.jobs import make_jobs
from invoice_pipeline.samples.render import letter_pdf
from pipeline_support import secrets_scan
from pipeline_support.helpers import free_port, run_cli, start_dev_server, stop_process_group

ROOT = Path(__file__).resolve().parents[1]
INJECTIONS = [
    "Robert'); DROP TABLE invoices; --",
    "' OR '1'='1' --",
    '"; DELETE FROM ledger_postings; --',
    "$$; DROP TABLE processing_jobs; $$",
    "%(invoice_id)s %s {0} ${HOME}",
    "1; SELECT pg_sleep(30); --",
    "\\'; TRUNCATE documents CASCADE; --",
    "<script>alert(1)</script>",
    "\u202eevil\u200b\ufeff",
]
TEXT_FIELDS = ["invoice_number", "seller_name", "buyer_name", "po_number"]


def run(ctx: ChaosContext, params: dict[str, int], seed: int) -> ScenarioResult:
    result = ScenarioResult("security", seed, dict(params))
    with timed(result):
        for _ in range(params["trials"]):
            _sql_injection(ctx, result)
            _xxe(ctx, result)
            result.trials += 1
        _git_secrets(result)
        if params.get("dev_server"):
            _listening_and_passwords(ctx, result)
    ctx.cleanup()
    return result


# -- SQL injection --------------------------------------------------------------------------------


def _tables(conn: psycopg.Connection[Any]) -> set[str]:
    return {
        r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
    }


def _sql_injection(ctx: ChaosContext, result: ScenarioResult) -> None:
    url = ctx.new_database()
    with psycopg.connect(url) as conn:
        before = _tables(conn)
    store = InvoiceStore(url, max_size=2)
    sent: dict[str, dict[str, str]] = {}
    for i, payload in enumerate(INJECTIONS):
        doc = {
            "format_version": 1,
            "invoice_number": f"INV-{i} {payload}",
            "document_type": "invoice",
            "issue_date": "2026-11-02",
            "currency": "EUR",
            "payable_total": f"{100 + i}.00",
            "seller_name": f"{payload} Supplies",
            "seller_vat_id": None,
            "buyer_name": payload,
            "po_number": payload,
        }
        org = f"org {payload}"
        inv = store.documents.store_document(json.dumps(doc).encode(), org, f"{payload}.json").invoice_id
        sent[str(inv)] = {k: str(doc[k]) for k in TEXT_FIELDS} | {
            "org_id": org,
            "filename": f"{payload}.json",
        }
        result.failures_injected += 1
    store.close()
    _, batch = make_jobs(resources(url, lock_ttl_seconds=30))
    batch.execute_in_process(
        run_config=batch_run_config(list(sent)), instance=DagsterInstance.ephemeral(), raise_on_error=False
    )
    with psycopg.connect(url) as conn:
        after = _tables(conn)
        if after != before:
            result.violate(f"tables changed by injected strings: {sorted(before ^ after)}")
        for sent_id, expected in sent.items():
            row = conn.execute(
                "SELECT status, fields, org_id, source_filename, invoice_number FROM invoices WHERE id = %s",
                (sent_id,),
            ).fetchone()
            if row is None:
                result.violate(f"invoice {sent_id} vanished")
                continue
            status, fields, org, filename, number = row
            if status != "processed":
                result.violate(f"injection invoice {sent_id} ended {status}")
                continue
            stored = {k: str((fields or {}).get(k)) for k in TEXT_FIELDS} | {
                "org_id": org,
                "filename": filename,
            }
            if stored != expected or number != expected["invoice_number"]:
                result.violate(f"injection strings not stored verbatim: sent {expected}, stored {stored}")
        posted = conn.execute("SELECT count(*) FROM ledger_postings").fetchone()
    if posted is None or posted[0] != len(INJECTIONS):
        result.violate(f"expected {len(INJECTIONS)} postings, found {posted}")
    check_common_invariants(url, result)
    result.count("sql_injection_strings", len(INJECTIONS) * (len(TEXT_FIELDS) + 2))


# -- XXE ---------------------------------------------------------------------------------------------

UBL = (
    '<Invoice xmlns="urn:oasis:names:specification:ubl:schema:xsd:Invoice-2" '
    'xmlns:cbc="urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2">'
    "<cbc:ID>{body}</cbc:ID><cbc:DocumentCurrencyCode>EUR</cbc:DocumentCurrencyCode></Invoice>"
)


def _xxe_payloads(secret: Path) -> list[bytes]:
    import io

    import pypdf

    uri = secret.as_uri()
    xinclude = f'<xi:include xmlns:xi="http://www.w3.org/2001/XInclude" href="{uri}" parse="text"/>'
    plain = [
        f'<?xml version="1.0"?><!DOCTYPE Invoice [<!ENTITY x SYSTEM "{uri}">]>{UBL.format(body="&x;")}'.encode(),
        f'<!DOCTYPE Invoice [<!ENTITY % p SYSTEM "{uri}"> %p;]>{UBL.format(body="1")}'.encode(),
        f'<!DOCTYPE Invoice SYSTEM "{uri}">{UBL.format(body="&x;")}'.encode(),
        f'<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE Invoice [<!ENTITY x SYSTEM "{uri}">]>{UBL.format(body="&x;")}'.encode(
            "utf-16"
        ),
        f'<!DOCTYPE Invoice [<!ENTITY x SYSTEM "{secret}">]>{UBL.format(body="&x;")}'.encode(),
        UBL.format(body=xinclude).encode(),
    ]
    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(letter_pdf(["Invoice No: 1"]))))
    writer.add_attachment("factur-x.xml", plain[0])
    buf = io.BytesIO()
    writer.write(buf)
    return plain + [buf.getvalue()]


def _xxe(ctx: ChaosContext, result: ScenarioResult) -> None:
    url = ctx.new_database()
    secret_value = f"TOP-SECRET-{secrets.token_hex(8)}"
    secret = ctx.scratch_dir("xxe") / "secret.txt"
    secret.write_text(secret_value)
    store = InvoiceStore(url, max_size=2)
    ids = [
        str(store.documents.store_document(p, "acme", f"xxe-{i}.xml").invoice_id)
        for i, p in enumerate(_xxe_payloads(secret))
    ]
    store.close()
    result.failures_injected += len(ids)
    _, batch = make_jobs(resources(url, lock_ttl_seconds=30, max_attempts=1))
    batch.execute_in_process(
        run_config=batch_run_config(ids), instance=DagsterInstance.ephemeral(), raise_on_error=False
    )
    with psycopg.connect(url) as conn:
        for table in sorted(_tables(conn)):
            hits = conn.execute(
                sql.SQL("SELECT count(*) FROM {} t WHERE t::text LIKE %s OR t::text LIKE %s").format(
                    sql.Identifier(table)
                ),
                (f"%{secret_value}%", f"%{secret_value.encode().hex()}%"),
            ).fetchone()
            if hits and hits[0]:
                result.violate(f"XXE: the secret file's content reached table {table}")
        outcomes: dict[str, int] = dict(
            conn.execute("SELECT status, count(*) FROM invoices GROUP BY 1").fetchall()
        )
    result.figures["xxe_outcomes"] = outcomes
    result.count("xxe_payloads", len(ids))
    check_common_invariants(url, result)


# -- secrets in the git tree -------------------------------------------------------------------------

SECRET_PATTERNS = [
    re.compile(r"postgres(?:ql)?(?:\+\w+)?://[^:/@\s'\"]+:[^@/\s'\"{}]+@"),
    re.compile(r"(?i)\b(?:password|passwd|secret|api[_-]?key|token)\s*[:=]\s*['\"][^'\"\s]{6,}['\"]"),
    re.compile(r"AKIA[0-9A-Z]{16}"),
    re.compile(r"-----BEGIN (?:RSA |EC |OPENSSH |DSA )?PRIVATE KEY-----"),
    re.compile(r"gh[pousr]_[A-Za-z0-9]{36}"),
]
# Test fixtures that look like secrets on purpose (an encrypted sample PDF's password, the XXE
# marker, a placeholder URL in documentation), each checked by hand.
ALLOWED = re.compile(
    r":\.\.\.@|s3cret|TOP-SECRET|user:password@|user:pass@|owner_password=\"owner\"|user_password=\"pw\""
)


def _git_secrets(result: ScenarioResult) -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(
        b"\0"
    )
    scanned = 0
    for name in files:
        if not name:
            continue
        path = ROOT / name.decode()
        if not path.is_file() or path.suffix in (".png", ".pdf", ".jpg", ".whl"):
            continue
        try:
            text = path.read_text("utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        scanned += 1
        for line_no, line in enumerate(text.splitlines(), 1):
            if ALLOWED.search(line) or "chaos/security.py" in str(path):
                continue
            for pattern in SECRET_PATTERNS:
                if pattern.search(line):
                    result.violate(f"possible secret in {name.decode()}:{line_no}: {line.strip()[:120]}")
    result.figures["git_files_scanned"] = scanned


# -- listening sockets and passwords -------------------------------------------------------------------


def _listening(pids: set[int]) -> list[tuple[int, str, int]]:
    """(pid, address, port) of every LISTEN TCP socket the given processes hold."""
    inodes: dict[str, int] = {}
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if link.startswith("socket:["):
                    inodes[link[8:-1]] = pid
        except OSError:
            continue
    found = []
    for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        for line in Path(table).read_text().splitlines()[1:]:
            parts = line.split()
            if parts[3] != "0A" or parts[9] not in inodes:
                continue
            addr_hex, port_hex = parts[1].split(":")
            raw = bytes.fromhex(addr_hex)
            if v6:
                words = [raw[i : i + 4][::-1] for i in range(0, 16, 4)]
                packed = b"".join(words)
                import ipaddress

                addr = str(ipaddress.IPv6Address(packed))
            else:
                addr = ".".join(str(b) for b in raw[::-1])
            found.append((inodes[parts[9]], addr, int(port_hex, 16)))
    return found


def _descendants(root: int) -> set[int]:
    """root and every process below it (`invoice-pipeline dev` puts `dagster dev` in a session of its own)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                parents[int(entry)] = int(stat[stat.rindex(")") + 2 :].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found = {root}
    while True:
        more = {pid for pid, ppid in parents.items() if ppid in found} - found
        if not more:
            return found
        found |= more


def _children_of(root: int) -> set[int]:
    pids = {root}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                if int(stat[stat.rindex(")") + 2 :].split()[1]) == root:
                    pids.add(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return pids


def _check_loopback(result: ScenarioResult, what: str, pids: set[int], must_see: set[int]) -> None:
    sockets = _listening(pids)
    ports = {p for _, _, p in sockets}
    for port in must_see - ports:
        result.violate(f"{what}: expected a listening socket on port {port}, found {sorted(ports)}")
    for pid, addr, port in sockets:
        if addr not in ("127.0.0.1", "::1"):
            result.violate(f"{what}: pid {pid} listens on {addr}:{port}, not loopback")
    result.figures.setdefault("listening_sockets", {})[what] = sorted(f"{a}:{p}" for _, a, p in sockets)


def _admin(pg: EmbeddedPostgres) -> psycopg.Connection[Any]:
    """A superuser connection to the scenario's embedded server (its password file, not the env)."""
    return psycopg.connect(
        pg.url("postgres"), autocommit=True, connect_timeout=5, passfile=str(pg.password_file)
    )


def _password_role(result: ScenarioResult, pg: EmbeddedPostgres) -> tuple[str, str, str] | None:
    """A role with a password and its own database on the embedded server; None (a violation:
    the password check cannot run) when it cannot be made."""
    role, password = f"chaos_sec_{secrets.token_hex(4)}", f"pw-{secrets.token_hex(12)}"
    url = f"postgresql://{role}:{password}@127.0.0.1:{pg.port}/{role}"
    try:
        with _admin(pg) as conn:
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN CREATEDB PASSWORD {}").format(
                    sql.Identifier(role), sql.Literal(password)
                )
            )
            conn.execute(
                sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(role), sql.Identifier(role))
            )
            hba = conn.execute(
                "SELECT auth_method FROM pg_hba_file_rules WHERE address = '127.0.0.1' LIMIT 1"
            ).fetchone()
    except psycopg.Error as exc:
        result.violate(
            f"password check could not run: no role with a password on the embedded server ({exc})"
        )
        return None
    result.figures["password_check_auth_method"] = hba[0] if hba else "unknown"
    # The password must be what lets the role in: without it the server refuses the login.
    try:
        psycopg.connect(
            f"postgresql://{role}@127.0.0.1:{pg.port}/{role}", connect_timeout=5, passfile=os.devnull
        ).close()
        result.violate(f"the embedded server admitted role {role} without its password")
        result.figures["password_required"] = False
    except psycopg.OperationalError:
        result.figures["password_required"] = True
    return role, password, url


def _drop_role(pg: EmbeddedPostgres, role: str) -> None:
    with _admin(pg) as conn:
        for db in (role + "_dagster", role):
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def _cli(env: dict[str, str], *args: str) -> str:
    done = run_cli(*args, env=env, timeout=300)
    return done.stdout + done.stderr


def _listening_and_passwords(ctx: ChaosContext, result: ScenarioResult) -> None:
    home = ctx.short_dir("sec")
    pg_port, ui_port = free_port(), free_port()
    env = dict(os.environ, INVOICE_PIPELINE_HOME=str(home), INVOICE_PIPELINE_PG_PORT=str(pg_port))
    env.pop("INVOICE_PIPELINE_DATABASE_URL", None)
    env.pop("DAGSTER_HOME", None)
    result.figures["password_check"] = "not run"
    # The embedded server, as `invoice-pipeline db start` starts it by default. It stays up for
    # the password check (its role lives there), and is stopped and deleted at the end.
    output = _cli(env, "db", "start")
    pg = EmbeddedPostgres(home / "pgdata", pg_port)
    role: tuple[str, str, str] | None = None
    try:
        try:
            # As root the data directory lives outside the home (db/embedded.py): ask the server.
            pid_line = (pg.pgdata / "postmaster.pid").read_text().splitlines()[0]
            _check_loopback(result, "embedded_postgres", _children_of(int(pid_line)), {pg_port})
        except (OSError, ValueError, IndexError):
            result.violate(f"embedded PostgreSQL did not start: {output[-500:]}")
            return
        role = _password_role(result, pg)
        if role is None:
            return
        _, password, url = role
        env["INVOICE_PIPELINE_DATABASE_URL"] = url
        inbox = home / "inbox"
        inbox.mkdir(exist_ok=True)
        sample = home / "secret-run.json"
        sample.write_text(
            json.dumps(
                {
                    "invoice_number": "SEC-1",
                    "seller_name": "S",
                    "currency": "EUR",
                    "payable_total": "5.00",
                }
            )
        )
        outputs = [
            _cli(env, "migrate"),
            _cli(env, "ingest", str(sample)),
            _cli(env, "process"),
            _cli(env, "status"),
        ]
        log = home / "dev.log"
        proc = start_dev_server(env, ui_port, log)
        try:
            if proc.poll() is not None:
                result.violate(f"invoice-pipeline dev exited: {log.read_text()[-1000:]}")
            else:
                pids = _descendants(proc.pid)
                result.figures["dev_processes"] = len(pids)
                _check_loopback(result, "invoice_pipeline_dev", pids, {ui_port})
        finally:
            stop_process_group(proc)
        outputs.append(log.read_text())
        _check_password(result, password, url, home, outputs)
    finally:
        if role is not None:
            _drop_role(pg, role[0])
        env.pop("INVOICE_PIPELINE_DATABASE_URL", None)
        _cli(env, "db", "stop")
        pg.destroy()


def _check_password(result: ScenarioResult, password: str, url: str, home: Path, outputs: list[str]) -> None:
    for text in outputs:
        if password in text:
            result.violate("the database password appears in CLI or dagster dev output")
    files, scanned = secrets_scan.in_files(password, home)
    for path in files:
        result.violate(f"the database password is written to {path}")
    result.figures["password_files_scanned"] = scanned
    dagster_db = urlunsplit(urlsplit(url)._replace(path=urlsplit(url).path + "_dagster"))
    try:
        places, values = secrets_scan.in_database(password, dagster_db)
    except psycopg.Error as exc:
        result.violate(f"could not inspect the Dagster storage: {exc}")
        return
    for place in places:
        result.violate(f"the database password is stored in the Dagster storage: {place}")
    result.figures["dagster_storage_values_scanned"] = values
    result.figures["password_check"] = "done (files, decompressed storage values, outputs)"
