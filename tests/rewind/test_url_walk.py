"""Every URL of the project, walked as four callers, answers exactly what that caller should get.

The callers: anonymous, an agent's bearer token (which only the download of its own recovery
takes), a staff member without any permission, and an approver (the approval permission and the
view of recovery requests). The URLs come from the URL configuration itself, so a new route is
walked without anyone listing it; what each caller gets is said by the rules below, per kind of
route, and a route no rule knows fails the test.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib import admin
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from recoveries.models import FlrSession, RecoveryRequest
from rewind.audit import Actor
from rewind.sites import site_create
from tests.mcpfixtures import make_agent_token

ANONYMOUS, AGENT, STAFF, APPROVER = "anonymous", "agent token", "staff without permissions", "approver"
CALLERS = (ANONYMOUS, AGENT, STAFF, APPROVER)
# Routes the approver may open: the recovery requests it reviews (view permission) and their pages.
APPROVER_MODELS = {"recoveries_recoveryrequest"}
# The REST routes that only act (POST): a GET is refused by method once the caller is signed in.
POST_ONLY_API = {
    "catalog-api:tool-disable",
    "catalog-api:sighting-classify",
    "rewind-api:site-check",
    "rewind-api:agent-token-issue",
    "rewind-api:agent-token-revoke",
    "rewind-api:upstream-check",
    "rewind-api:upstream-tool-policy",
    "rewind-api:upstream-tool-approve",
    "rewind-api:held-call-approve",
    "rewind-api:held-call-deny",
    "rewind-api:stop-lift",
}
# The id filled in for a model with no record: its pages say it does not exist (a redirect).
MISSING = "424242"


def _walk(patterns: list[Any], prefix: str = "", namespace: str = "") -> Iterator[tuple[str, str]]:
    for p in patterns:
        if isinstance(p, URLResolver):
            inner = f"{namespace}:{p.namespace}" if namespace and p.namespace else p.namespace or namespace
            yield from _walk(p.url_patterns, prefix + str(p.pattern), inner)
        elif isinstance(p, URLPattern):
            yield prefix + str(p.pattern), f"{namespace}:{p.name}" if namespace else str(p.name)


@pytest.fixture
def objects(db: None, approver: Any, staff_no_perms: Any) -> dict[str, Any]:
    """One record of each kind a route names, so a route with an id opens a real one."""
    agent, token = make_agent_token("walker")
    site = site_create(
        actor=Actor.system("tests"), name="Walk", base_url="https://zvm.invalid", username="u", password="p"
    )
    recovery = RecoveryRequest.objects.create(
        agent=agent, agent_name=agent.name, vm_identifier="vm-1", vm_name="web01", path="/etc/hostname",
        normalized_path="/etc/hostname", os="linux", reason="walk", checkpoint_identifier="cp-1",
        checkpoint_source="tag", expires_at=timezone.now() + timedelta(hours=1),
    )  # fmt: skip
    FlrSession.objects.create(
        site=site, recovery=recovery, session_id="s-1", vm_identifier="vm-1", vpg_identifier="vpg-1",
        checkpoint_identifier="cp-1",
    )  # fmt: skip
    return {"token": token, "site": site, "recovery": recovery, "agent": agent}


def _concrete(pattern: str, name: str, objects: dict[str, Any]) -> str | None:
    """The pattern with its parameters filled from ``objects``; None for the admin's catch-alls."""
    if "(?P<" in pattern or pattern.startswith("^"):
        if name == "admin:app_list":
            return "/admin/recoveries/"
        return None
    model_key = re.match(r"admin/(\w+)/(\w+)/", pattern)
    pk = "1"
    if model_key and "<path:object_id>" in pattern:
        model = next(m for m in admin.site._registry if (m._meta.app_label, m._meta.model_name) == model_key.groups())
        first = model._default_manager.order_by("pk").first()
        pk = str(first.pk) if first is not None else MISSING
    values = {
        "object_id": pk,
        "pk": str(objects["recovery"].pk) if "recover" in pattern else str(objects["agent"].pk),
        "site_pk": str(objects["site"].pk),
        "session_id": "s-1",
        "decision": "approve",
        "content_type_id": "1",
        "id": str(objects["agent"].owner_id),
        "token_id": "1",
        "seq": "1",
    }
    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", lambda m: values.get(m.group(1), "1"), pattern)


def _admin_model_route(name: str) -> tuple[str, str] | None:
    found = re.match(
        r"admin:(\w+?)_(changelist|add|history|delete|change|review|decide|live|end|connect|test|ask|approve)$", name
    )
    return (found.group(1), found.group(2)) if found else None


def expected(caller: str, name: str, path: str) -> int | None:
    """What ``caller`` gets from GET ``path`` (route ``name``); None when no rule knows the route."""
    signed_in = caller in (STAFF, APPROVER)
    fixed = {
        "None": 302,  # "/" → the admin
        "health": 200,
        "ready": 200,  # the readiness probe: public, like health (503 while a dependency is down)
        "metrics": 403,  # no metrics token or network configured: nobody
        "admin:login": 302 if signed_in else 200,
        "api-schema": 200 if signed_in else 403,
        "api-docs": 200 if signed_in else 302,
    }
    if name in fixed:
        return fixed[name]
    if name.startswith("oauth2_provider:"):
        return _oauth(caller, name)
    if name.startswith("admin:"):
        if not signed_in:
            return 302  # to the login page
        return _admin_signed_in(caller, name, path)
    # The REST API: session login only, except the download, which takes the requesting agent's token.
    if name == "recoveries-api:download":
        return {ANONYMOUS: 401, AGENT: 404, STAFF: 403, APPROVER: 404}[caller]  # 404: nothing recovered yet
    if name in POST_ONLY_API:
        return 405 if signed_in else 403
    if name == "recoveries-api:diff":
        return 404 if caller == APPROVER else 403  # nothing pulled and compared yet
    if name == "recoveries-api:guest-file-tools":
        return 403  # the guest file tools' own permissions, which neither signed-in caller holds
    if name == "recoveries-api:guest-file-tools-detail":
        return 405 if signed_in else 403  # DELETE only
    if name in (
        "recoveries-api:approve",
        "recoveries-api:deny",
        "recoveries-api:write-back",
        "recoveries-api:no-write-back",
    ):
        return 405 if caller == APPROVER else 403  # POST only, for those who may review recoveries
    if caller == APPROVER and name.startswith("recoveries-api:"):
        return 200
    return 403


def _oauth(caller: str, name: str) -> int:
    """The authorization server: its metadata is public; its endpoints take a POST or their own credentials."""
    if name in ("oauth2_provider:oauth-server-metadata", "oauth2_provider:oauth-resource-metadata"):
        return 200
    if name == "oauth2_provider:None":  # the resource metadata of a path under the service (RFC 9728)
        return 200
    if name == "oauth2_provider:authorize":
        # Consent needs a person who may consent: neither the staff without permissions nor the
        # approver has that permission. Anyone else is asked to sign in only for a request that can
        # go on, and the walk's bare GET names no client: a page says so (rewind.oauth.views).
        return 403 if caller in (STAFF, APPROVER) else 400
    if name == "oauth2_provider:dcr-register-management":
        return 401  # only the registration access token of that client opens it (RFC 7592)
    return 405  # token, revoke and register: POST only, whoever asks


def _admin_signed_in(caller: str, name: str, path: str) -> int | None:
    own = {
        "admin:index": 200,
        "admin:logout": 405,  # POST only
        "admin:password_change": 200,
        "admin:password_change_done": 200,
        "admin:jsi18n": 200,
        "admin:autocomplete": 403,
        "admin:view_on_site": 404,
        "admin:app_list": 200 if caller == APPROVER else 404,
        "admin:None": 302,  # <model>/<id>/ → <model>/<id>/change/, whoever asks
        # GET sends back to the list; only a POST (with CSRF) sends a test notification.
        "admin:rewind_notificationdelivery_test": 302,
        # The list opens on its pending queue (a redirect), whoever asks; that page checks the permission.
        "admin:recoveries_recoveryrequest_changelist": 302,
        "admin:rewind_heldcall_changelist": 302,
    }
    if name in own:
        return own[name]
    route = _admin_model_route(name)
    if route is None:
        return None  # no rule: the test fails, naming the route
    model, view = route
    if view == "history" and MISSING in path:
        return 302  # Django looks the record up before the permission: "does not exist"
    if caller == APPROVER and model in APPROVER_MODELS:
        return {"change": 200, "history": 200, "review": 200, "decide": 200}.get(view, 403)
    return 403


def _client(caller: str, objects: dict[str, Any], approver: Any, staff_no_perms: Any) -> Client:
    if caller == AGENT:
        return Client(HTTP_AUTHORIZATION=f"Bearer {objects['token']}")
    client = Client()
    if caller == STAFF:
        client.force_login(staff_no_perms)
    elif caller == APPROVER:
        client.force_login(approver)
    return client


def test_every_url_answers_each_caller_as_it_should(
    objects: dict[str, Any], approver: Any, staff_no_perms: Any
) -> None:
    routes = [(p, n) for p, n in _walk(get_resolver().url_patterns)]
    walked, wrong = 0, []
    clients: dict[str, Client] = {c: _client(c, objects, approver, staff_no_perms) for c in CALLERS}
    for pattern, name in routes:
        path = _concrete(pattern, name, objects)
        if path is None:
            continue
        for caller in CALLERS:
            status = clients[caller].get(path).status_code
            want = expected(caller, name, path)
            walked += 1
            if status != want:
                wrong.append(f"{caller:26} GET {path} ({name}): {status}, expected {want}")
    assert wrong == [], "\n".join(wrong)
    assert walked >= 4 * 150, walked  # every route, not a few
