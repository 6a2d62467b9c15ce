"""The review page: a small server-rendered Starlette app over the engine's review functions.

An adapter, like the Dagster one, in parts over a small core (as the store is): `web.py` holds
what every page shares (the request's reviewer and session, CSRF-checked forms, rendering, and the
sign-in requirement as one decorator, `signed_in`); the pages are `login`, `invoices` (the queue
and an invoice: see, correct, decide), `layouts` and `vendors` ("Who is paid"), named as the
CLI's commands are. This module wires them and holds the routes.

No JavaScript: forms and links. Every POST carries the session's CSRF token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from invoice_pipeline.documents.page_images import PageRenderer
from invoice_pipeline.engine.metrics import exposition, registry_for
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.review_ui.auth import AuthConfig, unknown_user_hash
from invoice_pipeline.review_ui.budget import BudgetConfig, RequestBudget, RequestBudgetMiddleware
from invoice_pipeline.review_ui.invoices import InvoicesPage, highlight_css
from invoice_pipeline.review_ui.layouts import LayoutsPage
from invoice_pipeline.review_ui.login import LoginPage
from invoice_pipeline.review_ui.vendors import VendorsPage
from invoice_pipeline.review_ui.web import HERE, HostCheck, Web

# The field highlights, made once from the field names (invoices.highlight_css).
FIELDS_CSS = highlight_css().encode()


@dataclass
class ReviewUi:
    store: InvoiceStore
    auth: AuthConfig
    renderer: PageRenderer
    web: Web = field(init=False)
    login: LoginPage = field(init=False)
    invoices: InvoicesPage = field(init=False)
    layouts: LayoutsPage = field(init=False)
    vendors: VendorsPage = field(init=False)

    def __post_init__(self) -> None:
        self.web = Web(self.store, self.auth)
        self.login = LoginPage(self.web)
        self.invoices = InvoicesPage(self.web, self.renderer)
        self.layouts = LayoutsPage(self.web)
        self.vendors = VendorsPage(self.web)

    def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name == "fields.css":
            body = FIELDS_CSS
        elif name == "review.css":
            body = (HERE / "static" / name).read_bytes()
        else:
            return PlainTextResponse("not found", 404)
        return Response(body, media_type="text/css", headers={"Cache-Control": "max-age=3600"})

    def metrics(self, request: Request) -> Response:
        """Prometheus metrics, the same as `invoice-pipeline metrics` serves (engine/metrics.py):
        totals across organisations, no invoice's data, and no login (a scraper has none)."""
        return Response(exposition(registry_for(self.store)), media_type=CONTENT_TYPE_LATEST)

    def routes(self) -> list[Route]:
        login, invoices, layouts, vendors = self.login, self.invoices, self.layouts, self.vendors
        return [
            Route("/", invoices.queue),
            Route("/login", login.login, methods=["GET", "POST"]),
            Route("/logout", login.logout, methods=["POST"]),
            Route("/invoice/{invoice_id}", invoices.invoice),
            Route("/invoice/{invoice_id}/page/{page:int}.png", invoices.page_image),
            Route("/invoice/{invoice_id}/action", invoices.action, methods=["POST"]),
            Route("/layouts", layouts.layouts),
            Route("/layouts/export", layouts.layouts_export),
            Route("/layouts/import", layouts.layouts_import, methods=["POST"]),
            Route("/layouts/{layout_id}", layouts.layout),
            Route("/layouts/{layout_id}/disable", layouts.layout_disable, methods=["POST"]),
            Route("/vendors", vendors.vendors),
            Route("/vendors/profile", vendors.org_profile_add, methods=["POST"]),
            Route("/static/{name}", self.static),
            Route("/healthz", lambda r: PlainTextResponse("ok")),
            Route("/metrics", self.metrics),
        ]


def create_app(
    store: InvoiceStore,
    auth: AuthConfig,
    cache_dir: Path | None,
    renderer: PageRenderer | None = None,
    budget: RequestBudget | None = None,
) -> Starlette:
    unknown_user_hash()  # before the first login, so that one costs what every other does
    ui = ReviewUi(store, auth, renderer or PageRenderer(cache_dir))
    app = Starlette(routes=ui.routes())
    app.add_middleware(HostCheck, auth=auth)
    # Added last, so outermost: a request over its address's budget costs no Host check, no
    # session and no database read.
    budget = RequestBudget(BudgetConfig()) if budget is None else budget
    app.add_middleware(RequestBudgetMiddleware, auth=auth, budget=budget)
    app.state.review_ui = ui
    app.state.request_budget = budget
    return app
