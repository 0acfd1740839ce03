"""The authorization server's pages: the protected-resource metadata, the token endpoint and the consent page
(docs/oauth.md).

The consent page is the toolkit's authorization view with the profile's checks (https or loopback redirect URIs,
this /mcp as the only resource, PKCE S256) made before the person is asked anything, and one more question:
which of their agents the client acts as. Nothing is chosen for the person but the narrowest scope asked for.
The page runs no script, so it works under a Content Security Policy without inline code.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django import forms
from django.conf import settings
from django.contrib import admin
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.utils.csp import CSP
from django.views.decorators.csp import csp_override
from oauth2_provider import views as dot
from oauth2_provider.exceptions import FatalClientError, OAuthToolkitError
from oauth2_provider.forms import AllowForm
from oauth2_provider.models import Application
from oauth2_provider.settings import oauth2_settings
from oauth2_provider.views import AuthorizationView, OAuthProtectedResourceMetadataView
from oauthlib.oauth2.rfc6749.errors import CustomOAuth2Error, InvalidRequestError

from rewind.agents.models import Agent
from rewind.agents.services import agent_create
from rewind.lib.admin_base import actor_for
from rewind.lib.errors import ApplicationError
from rewind.mcp import scopes
from rewind.mcp.endpoint import mcp_resource, same_resource
from rewind.oauth.selectors import agents_for_consent
from rewind.oauth.services import agent_grant_create
from rewind.oauth.validators import DROPPED_SCOPES

# Consenting issues tokens for an agent, as "Connect an agent" does: the same permission.
CONSENT_PERMISSION = "rewind.add_agenttoken"
CREATE_AGENT_PERMISSION = "rewind.add_agent"


class ProtectedResourceMetadataView(OAuthProtectedResourceMetadataView):
    """RFC 9728 metadata of /mcp, at the well-known path with and without the ``/mcp`` suffix."""

    def get_resource(self, request: HttpRequest) -> str:
        return mcp_resource(request.build_absolute_uri("/"))

    def get_scopes_supported(self) -> list[str]:
        return list(scopes.ALL)


class TokenView(dot.TokenView):
    """The toolkit's token endpoint; an error raised while the token is saved (``invalid_target``, from the
    resource check) reaches the client as the JSON body RFC 6749 section 5.2 names, not as text/html."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response: HttpResponse = super().post(request, *args, **kwargs)
        if response.status_code >= 400 and response.get("Content-Type", "").startswith("text/html"):
            response["Content-Type"] = "application/json"
            response["Cache-Control"] = "no-store"
        return response


# Past this many agents, the page offers a field that finds one as the person types (the browser's
# own list: the page runs no script) instead of a radio button each.
AGENTS_AS_RADIOS = 6

# What each scope lets the client do, in the person's terms: shown beside its box on the consent page.
SCOPE_CONSEQUENCES: dict[str, str] = {
    scopes.READ: "Read only: look VMs up and see guards, recoveries, FLR sessions and the catalog. Changes nothing.",
    scopes.GUARD: "Pin a Zerto tagged checkpoint on every VPG of a VM before changing it, and run calls through "
    "the gateway that change VMs once their checkpoint is listed.",
    scopes.RECOVER: "Ask for files back from a checkpoint, even written back into the guest; a person approves "
    "each request first (never you, for your own agent).",
    scopes.SESSIONS: "Unmount FLR sessions this service mounted.",
    scopes.CATALOG: "Add tools to the list of mutating tools that must be guarded (only a person removes them).",
}


def narrowest(requested: list[str]) -> list[str]:
    """What the consent page ticks: the one scope asked for that lets the client do least (``scopes.ALL``
    runs from read-only to the most far-reaching); the person ticks more."""
    return [s for s in scopes.ALL if s in requested][:1]


class ConsentForm(AllowForm):
    """django-oauth-toolkit's form plus the agent and the scopes granted: no agent is picked for the person, and of
    the scopes asked for only the narrowest is ticked."""

    agent: forms.ModelChoiceField[Agent] = forms.ModelChoiceField(
        queryset=Agent.objects.none(),
        to_field_name="name",
        required=False,
        empty_label=None,
        widget=forms.RadioSelect,
        label="One of your agents",
        error_messages={"invalid_choice": "That is not one of your active agents."},
    )
    new_agent = forms.CharField(
        required=False,
        max_length=64,
        label="or a new agent named",
        help_text="Letters, digits, - and _; it will belong to you.",
    )
    granted = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple, label="It may")

    def __init__(self, *args: Any, user: Any, requested: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        agent_field = self.fields["agent"]
        assert isinstance(agent_field, forms.ModelChoiceField)
        agent_field.queryset = agents = agents_for_consent(user)
        self.agent_count = agents.count()
        self.agent_names = [a.name for a in agents] if self.agent_count > AGENTS_AS_RADIOS else []
        if self.agent_names:  # typed, the browser offering the matching names as the person types
            agent_field.widget = forms.TextInput(attrs={"list": "consent-agent-names", "autocomplete": "off"})
            agent_field.label = f"One of your {self.agent_count} agents (type a few letters)"
        granted_field = self.fields["granted"]
        assert isinstance(granted_field, forms.MultipleChoiceField)
        granted_field.choices = [(s, s) for s in requested]
        self.initial.setdefault("granted", narrowest(requested))
        self.can_create_agent = user.has_perm(CREATE_AGENT_PERMISSION)

    def scope_rows(self) -> list[tuple[Any, str, str]]:
        """(checkbox, the scope's summary, what it lets the client do) for each scope asked for."""
        return [
            (box, scopes.DESCRIPTIONS[box.data["value"]], SCOPE_CONSEQUENCES[box.data["value"]])
            for box in self["granted"]
        ]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if not data.get("allow"):
            return data  # a refusal needs no agent
        if data.get("new_agent"):
            if not self.can_create_agent:
                self.add_error("new_agent", "You may not create agents; pick one of yours.")
        elif data.get("agent") is None and "agent" not in self.errors:
            self.add_error("agent", "Pick the agent this client acts as, or name a new one.")
        if not data.get("granted"):
            self.add_error("granted", "Tick at least one thing the client may do, or cancel.")
        return data


def _duration(seconds: float | None) -> str:
    """``3600`` as "1 hour", ``2592000`` as "30 days": how the consent page states token lifetimes."""
    if seconds is None:
        return "until the grant is revoked"
    whole = int(seconds)
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if whole >= size and whole % size == 0:
            count = whole // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{whole} seconds"


def _redirect_allowed(uri: str) -> bool:
    """https anywhere; plain http only back to this machine (a native client's loopback listener, RFC 8252)."""
    parts = urlsplit(uri)
    return parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in ("localhost", "127.0.0.1", "::1"))


def _origin(uri: str) -> str:
    parts = urlsplit(uri)
    return f"{parts.scheme}://{parts.netloc}"


def _back_with(error: str, description: str, credentials: dict[str, Any]) -> OAuthToolkitError:
    """An error the client is sent back with (its redirect URI was checked already)."""
    return OAuthToolkitError(
        error=CustomOAuth2Error(error=error, description=description, state=credentials.get("state")),
        redirect_uri=credentials["redirect_uri"],
    )


# What a request that cannot go on without a usable redirect URI means to the person, by oauthlib's error.
_FATAL_MEANING = {
    "InvalidClientIdError": "this service does not know the client that sent you here: a client registers itself "
    "before it asks (Dynamic Client Registration, or a metadata document this service could fetch)",
    "MissingClientIdError": "the request does not say which client sent you here",
    "MismatchingRedirectURIError": "the address the client asked to send you back to is not one it registered",
    "InvalidRedirectURIError": "the address the client asked to send you back to is not a valid URL",
    "MissingRedirectURIError": "the request does not say where to send you back to",
}


class ConsentView(AuthorizationView):
    """GET: the client, its redirect URI, the scopes it asks for, and the person's agents. POST: the grant.

    The whole request is judged before anyone is asked to sign in: judged after, the redirect carrying a refusal
    would end the sign-in form's POST, which the admin's Content Security Policy (``form-action 'self'``) holds,
    and the person would see the sign-in form again while the client waited.
    """

    template_name = "oauth/consent.html"
    form_class = ConsentForm

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        self.dropped_scopes: list[str] = []
        if request.user.is_authenticated and not request.user.has_perm(CONSENT_PERMISSION):
            response = self.render_to_response({"forbidden": True}, status=403)
            return response
        if not request.user.is_authenticated and request.method == "GET":
            self.oauth2_data: dict[str, Any] = {}
            try:
                self.validate_authorization_request(request)
            except OAuthToolkitError as error:
                return self.error_response(error, application=None)
        return super().dispatch(request, *args, **kwargs)

    def error_response(self, error: OAuthToolkitError, application: Any, **kwargs: Any) -> HttpResponse:
        """The toolkit's, with what the error means in words for the page shown when nothing may be redirected to."""
        meaning = _FATAL_MEANING.get(type(error.oauthlib_error).__name__, "")
        return super().error_response(error, application, meaning=meaning, **kwargs)

    def validate_authorization_request(self, request: HttpRequest) -> tuple[list[str], dict[str, Any]]:
        """django-oauth-toolkit's checks, and: a resource other than this service's /mcp is refused (RFC 8707)."""
        requested_scopes, credentials = super().validate_authorization_request(request)
        self.dropped_scopes = list(getattr(credentials.get("request"), "dropped_scopes", []))
        if not _redirect_allowed(credentials["redirect_uri"]):
            # Registered, but not where the MCP specification lets tokens go: shown here, never redirected to.
            raise FatalClientError(
                error=InvalidRequestError(
                    description="the redirect URI must be https, or http on a loopback address (localhost)"
                )
            )
        ours = mcp_resource(request.build_absolute_uri("/"))
        for resource in request.GET.getlist("resource"):
            if not same_resource(resource, ours):
                raise _back_with(
                    "invalid_target", f"this server issues tokens only for {ours}, not for {resource}", credentials
                )
        # RFC 7636 section 4.3: a challenge without a method is "plain", which this server refuses (before the
        # person is asked anything, not after).
        if credentials.get("code_challenge_method", "plain") != "S256":
            raise _back_with("invalid_request", 'code_challenge_method must be "S256"', credentials)
        return requested_scopes, credentials

    def _requested(self) -> list[str]:
        raw = self.oauth2_data.get("scopes") or (self.request.POST.get("scope") or "").split()
        return [s for s in scopes.ALL if s in raw]

    def get_form_kwargs(self) -> dict[str, Any]:
        return {**super().get_form_kwargs(), "user": self.request.user, "requested": self._requested()}

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        form = context.get("form")
        client_id = self.oauth2_data.get("client_id") or (form.data.get("client_id") if form is not None else None)
        application = Application.objects.filter(client_id=client_id).first() if client_id else None
        # A page of its own, without the admin's sidebar: the person came from a client, not the admin.
        context.update({**admin.site.each_context(self.request), "is_nav_sidebar_enabled": False})
        context.update(
            access_token_lifetime=_duration(oauth2_settings.ACCESS_TOKEN_EXPIRE_SECONDS),
            refresh_token_lifetime=_duration(oauth2_settings.REFRESH_TOKEN_EXPIRE_SECONDS),
            application=application,
            by_metadata_document=application is not None
            and application.registration_source == Application.RegistrationSource.CIMD,
            redirect_uri=self.oauth2_data.get("redirect_uri") or (form.data.get("redirect_uri") if form else ""),
            dropped_scopes=[(s, DROPPED_SCOPES[s]) for s in self.dropped_scopes],
            title="Let an MCP client act as one of your agents",
        )
        return context

    def render_to_response(self, context: dict[str, Any], **response_kwargs: Any) -> HttpResponse:
        """The page, its ``form-action`` allowing the client's redirect URI (registered for this client and allowed
        by the profile): with only 'self' there, browsers hold the redirect that carries the grant."""
        response = super().render_to_response(context, **response_kwargs)
        application, redirect_uri = context.get("application"), context.get("redirect_uri") or ""
        if (
            application is not None
            and _redirect_allowed(redirect_uri)
            and application.redirect_uri_allowed(redirect_uri)
        ):
            policy: dict[str, Any] = {**settings.SECURE_CSP, "form-action": [CSP.SELF, _origin(redirect_uri)]}
            # Django's public way to set one response's policy is its view decorator.
            response = csp_override(policy)(lambda _request: response)(self.request)
        return response

    def form_valid(self, form: ConsentForm) -> HttpResponse:
        data = form.cleaned_data
        if not data.get("allow"):
            return super().form_valid(form)  # access_denied, back to the client
        if not _redirect_allowed(data["redirect_uri"]):  # the page never offers one; a hand-made form might
            form.add_error(None, "the redirect URI must be https, or http on a loopback address (localhost)")
            return self.form_invalid(form)
        application = Application.objects.get(client_id=data["client_id"])
        actor = actor_for(self.request)
        try:
            with transaction.atomic():  # a new agent only with its grant
                agent = data["agent"]
                if data.get("new_agent"):
                    agent = agent_create(actor=actor, name=data["new_agent"], owner=self.request.user)
                grant = agent_grant_create(
                    actor=actor,
                    user=self.request.user,
                    application=application,
                    agent=agent,
                    granted=tuple(data["granted"]),
                    redirect_uri=data["redirect_uri"],
                    request_id=getattr(self.request, "id", None),
                )
        except ApplicationError as exc:
            form.add_error(None, exc.message)
            return self.form_invalid(form)
        data["scope"] = grant.scope
        return super().form_valid(form)
