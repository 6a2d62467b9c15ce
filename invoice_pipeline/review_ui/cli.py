"""`invoice-pipeline review-ui` and `invoice-pipeline review-ui-user`: the review page's commands.

Registered by cli.py (`add_commands`); kept here so the page's settings live beside the page.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path
from typing import Any

from invoice_pipeline.config import ENV_REVIEW_PROXY_HEADER, ENV_REVIEW_USERS, Settings
from invoice_pipeline.engine.reviewers import AuthError, add_user, load_users
from invoice_pipeline.review_ui.auth import (
    DEFAULT_IDLE_MINUTES,
    DEFAULT_LIFETIME_HOURS,
    DEFAULT_MAX_SESSIONS,
    DEFAULT_TRUSTED_PROXIES,
    AuthConfig,
    check_bind,
)
from invoice_pipeline.review_ui.budget import (
    DEFAULT_BURST,
    DEFAULT_MAX_ADDRESSES,
    DEFAULT_RATE,
    BudgetConfig,
    RequestBudget,
)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 3100
ENV_USERS = ENV_REVIEW_USERS
ENV_PROXY_HEADER = ENV_REVIEW_PROXY_HEADER
# The page's handlers run in a thread pool, each request with its own queries: up to this many
# talk to the database at once (the pool the page opens the store with).
REVIEW_PAGE_POOL = 8


def auth_config(args: argparse.Namespace, settings: Settings) -> AuthConfig:
    """The page's authentication: each option given, else its setting (read once, in Settings)."""
    users_file = args.users or settings.review_users or None
    proxy_header = args.proxy_header or settings.review_proxy_header or None
    if proxy_header and not users_file:
        # Fail closed: without a list of who may act on which org, any name the proxy sent
        # would act on every org.
        raise AuthError(
            "--proxy-header needs --users FILE: the people the proxy may name and their orgs "
            '({"alice": {"orgs": ["acme"]}}; no password needed, they log in at the proxy)'
        )
    if bool(args.tls_cert) != bool(args.tls_key):
        raise AuthError("--tls-cert and --tls-key go together")
    tls = bool(args.tls_cert) or args.behind_tls_proxy
    return AuthConfig(
        users=load_users(Path(users_file), passwords=not proxy_header) if users_file else None,
        users_file=Path(users_file) if users_file else None,
        proxy_header=proxy_header,
        trusted_proxies=tuple(args.trusted_proxy or DEFAULT_TRUSTED_PROXIES),
        idle_seconds=args.session_idle_minutes * 60,
        lifetime_seconds=args.session_hours * 3600,
        secure_cookie=args.secure_cookie,
        allowed_hosts=tuple(args.allowed_host or ()),
        max_sessions=args.max_sessions,
        tls=tls,
        forwarded_for=args.forwarded_for,
    )


def budget_config(args: argparse.Namespace) -> BudgetConfig:
    return BudgetConfig(
        burst=args.request_burst, rate=args.request_rate, max_addresses=args.max_client_addresses
    )


def cmd_review_ui(args: argparse.Namespace, settings: Settings) -> int:
    """Check the bind rule before anything else, then the database, then serve."""
    import uvicorn

    from invoice_pipeline.engine.store import open_store
    from invoice_pipeline.review_ui.app import create_app

    try:
        auth = auth_config(args, settings)
        budget = budget_config(args)
        check_bind(args.host, auth)
    except (AuthError, ValueError) as exc:
        print(f"invoice-pipeline review-ui: {exc}", file=sys.stderr)
        return 2
    store = open_store(settings, REVIEW_PAGE_POOL)
    try:
        app = create_app(store, auth, Path(settings.home) / "review-ui-cache", budget=RequestBudget(budget))
        scheme = "https" if args.tls_cert else "http"
        print(
            f"Review page on {scheme}://{args.host}:{args.port}  (authentication: {auth.mode})",
            flush=True,
        )
        uvicorn.run(
            app,
            host=args.host,
            port=args.port,
            log_level="warning",
            access_log=False,
            # The client's address is the socket's peer unless --forwarded-for says otherwise
            # (auth.client_address): uvicorn must not rewrite it from X-Forwarded-For first.
            proxy_headers=False,
            ssl_certfile=args.tls_cert,
            ssl_keyfile=args.tls_key,
        )
    finally:
        store.close()
    return 0


def cmd_review_ui_user(args: argparse.Namespace, settings: Any) -> int:
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass(f"password for {args.name}: ")
        if getpass.getpass("again: ") != password:
            print("the passwords differ", file=sys.stderr)
            return 2
    try:
        add_user(Path(args.file), args.name, password, args.org or None)
    except AuthError as exc:
        print(f"invoice-pipeline review-ui-user: {exc}", file=sys.stderr)
        return 2
    print(f"{args.name} can log in to the review page (users file {args.file})")
    return 0


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=DEFAULT_HOST, help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}")
    parser.add_argument("--users", help=f"reviewer accounts (JSON, scrypt hashes); or ${ENV_USERS}")
    parser.add_argument(
        "--proxy-header",
        help=f"trust this header (e.g. X-Remote-User) from --trusted-proxy addresses as the reviewer; or ${ENV_PROXY_HEADER}",
    )
    parser.add_argument(
        "--trusted-proxy",
        action="append",
        help="address of the authenticating reverse proxy (repeatable; default 127.0.0.1 and ::1)",
    )
    parser.add_argument("--session-idle-minutes", type=float, default=DEFAULT_IDLE_MINUTES)
    parser.add_argument("--session-hours", type=float, default=DEFAULT_LIFETIME_HOURS)
    parser.add_argument("--secure-cookie", action="store_true", help="served over HTTPS: Secure cookie")
    parser.add_argument(
        "--allowed-host",
        action="append",
        help="a host name the page is served under (repeatable; loopback's are always allowed); "
        "any other Host header gets 400",
    )
    parser.add_argument(
        "--max-sessions", type=int, default=DEFAULT_MAX_SESSIONS, help="logged-in sessions kept at most"
    )
    parser.add_argument("--tls-cert", help="serve HTTPS with this certificate (PEM)")
    parser.add_argument("--tls-key", help="the certificate's private key (PEM)")
    parser.add_argument(
        "--behind-tls-proxy",
        action="store_true",
        help="an HTTPS proxy in front of the page terminates TLS: cookies are Secure",
    )
    parser.add_argument(
        "--request-burst",
        type=int,
        default=DEFAULT_BURST,
        help=f"requests a client address may make at once (default {DEFAULT_BURST})",
    )
    parser.add_argument(
        "--request-rate",
        type=float,
        default=DEFAULT_RATE,
        help=f"requests per second a client address may make after its burst (default {DEFAULT_RATE:g})",
    )
    parser.add_argument(
        "--max-client-addresses",
        type=int,
        default=DEFAULT_MAX_ADDRESSES,
        help=f"client addresses whose budget is remembered (default {DEFAULT_MAX_ADDRESSES:,})",
    )
    parser.add_argument(
        "--forwarded-for",
        action="store_true",
        help="the client's address is the rightmost X-Forwarded-For item (all its lines, in order) "
        "that is no --trusted-proxy, when the request comes from one (for budgets and login "
        "throttling behind a reverse proxy)",
    )


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ui = sub.add_parser("review-ui", help="the review page: see held invoices, correct and decide them")
    add_serve_arguments(ui)
    ui.set_defaults(func=cmd_review_ui)
    user = sub.add_parser("review-ui-user", help="add a reviewer account to a users file")
    user.add_argument("file", help="the users file (created 0600)")
    user.add_argument("name")
    user.add_argument("--org", action="append", help="an org this reviewer may see (repeatable; default all)")
    user.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    user.set_defaults(func=cmd_review_ui_user)
