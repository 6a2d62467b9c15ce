"""Who is paid (`/vendors`), as `invoice-pipeline vendors` has it: each of the reviewer's orgs, its
own identity (the buyer on every invoice it receives) and its vendor registry; a reviewer adds
to their own org's profile. See docs/vendors.md.

The orgs are picked from a list, never typed: the reviewer's own, or for a reviewer allowed every
org, the orgs the database knows (`store.vendors.known_orgs`).
"""

from __future__ import annotations

from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from invoice_pipeline.domain.identity import IDENTIFIER_KINDS
from invoice_pipeline.engine.reviewers import Reviewer
from invoice_pipeline.review_ui.auth import audit_name
from invoice_pipeline.review_ui.web import Page, SignedIn, permitted_org, signed_in

MAX_VALUE_CHARS = 500


class VendorsPage(Page):
    def _choices(self, reviewer: Reviewer) -> list[str]:
        """The orgs the reviewer picks from: their own, or every org the database knows."""
        if reviewer.orgs is not None:
            return sorted(set(reviewer.orgs))
        return self.store.vendors.known_orgs()

    @signed_in()
    def vendors(self, request: Request, who: SignedIn) -> Response:
        choices = self._choices(who.reviewer)
        picked = permitted_org(who.reviewer, request.query_params.get("org"))
        if who.reviewer.orgs is not None:
            # A reviewer's own orgs are all shown, or the one picked of them.
            orgs = [picked] if picked in choices else choices
        else:
            orgs = [picked] if picked else []
        profiles = self.store.vendors.org_profiles(orgs)
        return self.web.html(
            "vendors.html",
            who.ctx,
            orgs=[
                {"org": org, "profile": profiles[org], "vendors": self.store.vendors.list_vendors(org)}
                for org in orgs
            ],
            choices=choices,
            picked=picked,
            any_org=who.reviewer.orgs is None,
            kinds=IDENTIFIER_KINDS,
        )

    @signed_in()
    def org_profile_add(self, request: Request, who: SignedIn) -> Response:
        ctx, form = who.ctx, who.form
        org = permitted_org(who.reviewer, form.get("org"))
        if org is None:
            return self.web.error(ctx, 404, "no such organisation (or not one of yours)")
        kind, value = form.get("kind", ""), form.get("value", "").strip()[:MAX_VALUE_CHARS]
        if kind not in IDENTIFIER_KINDS or not value:
            return self.web.error(ctx, 400, f"give a kind ({', '.join(IDENTIFIER_KINDS)}) and a value")
        try:
            added = self.store.vendors.add_org_identity(
                org,
                kind,
                value,
                source="set on the review page",
                added_by=audit_name(self.web.auth, who.reviewer),
            )
        except ValueError as exc:
            return self.web.error(ctx, 400, str(exc))
        ctx.flash(
            "done",
            f"{org}: {kind} {value} " + ("added to its profile" if added else "was in its profile already"),
        )
        return self.web.redirect(ctx, "/vendors?" + urlencode({"org": org}))
