"""The admin's models grouped by what operators do, in the product's words.

A model finds its group, in this order: its ModelAdmin's ``operator_group`` attribute (a group
key: a part can place a new model without touching this file), the explicit list below, the
part it is defined in (the longest matching module prefix), else "More". Framework internals
(Celery's result tables) are left out of the index and the sidebar; their pages still answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib import admin
from django.db.models import Model


@dataclass(frozen=True)
class Group:
    key: str
    name: str
    models: tuple[str, ...]  # model labels (app_label.model_name), in the order shown
    parts: tuple[str, ...] = ()  # modules whose other models belong here


GROUPS: tuple[Group, ...] = (
    Group(
        "approvals",
        "Approvals",
        (
            "rewind.heldcall",
            "recoveries.recoveryrequest",
            "rewind.stopswitch",
            "rewind.approvalrule",
            "rewind.policyversion",
        ),
        ("recoveries", "rewind.approvals", "rewind.policy"),
    ),
    Group(
        "guards",
        "Guards and checkpoints",
        ("rewind.changeguard", "rewind.changeguardvpg"),
        ("rewind.checkpoints", "rewind.protection"),
    ),
    Group("sessions", "FLR sessions", ("recoveries.flrsession", "recoveries.reapersweep", "recoveries.flrlisting")),
    Group("catalog", "The catalog", ("catalog.mutatingtool", "catalog.toolsighting"), ("catalog",)),
    Group(
        "gateway",
        "Gateway",
        ("rewind.upstream", "rewind.upstreamtool", "rewind.gatewaycall", "rewind.upstreamlink"),
        ("rewind.gateway",),
    ),
    Group(
        "access",
        "Agents and sites",
        (
            "rewind.agent",
            "rewind.agenttoken",
            "rewind.agentgrant",
            "oauth2_provider.application",
            "rewind.site",
            "rewind.sitepoller",
            "rewind.workerheartbeat",
            "rewind.brokeroutage",
        ),
        ("rewind.agents", "rewind.oauth", "oauth2_provider", "rewind.sites", "rewind.workers", "rewind.mcp"),
    ),
    Group("audit", "The audit", ("rewind.auditevent",), ("rewind.audit",)),
    Group(
        "people",
        "People",
        ("auth.user", "auth.group", "axes.accessattempt", "axes.accessfailurelog", "axes.accesslog"),
        ("django.contrib.auth", "axes"),
    ),
)
OTHER = Group("more", "More", ())
HIDDEN_APPS = frozenset({"django_celery_results", "django_celery_beat"})

# Names in the product's words where the model's own plural reads otherwise.
LABELS = {
    "recoveries.recoveryrequest": "Recovery requests",
    "rewind.heldcall": "Calls held for a person",
    "rewind.stopswitch": "Stop switches",
    "rewind.approvalrule": "VM rules (a person approves)",
    "rewind.policyversion": "Policy version",
    "recoveries.flrsession": "FLR sessions opened here",
    "recoveries.reapersweep": "Reaper sweeps",
    "catalog.mutatingtool": "Mutating tools",
    "catalog.toolsighting": "Unlisted tools seen",
    "rewind.changeguard": "Guards",
    "rewind.agenttoken": "Agent tokens",
    "rewind.agentgrant": "OAuth grants",
    "oauth2_provider.application": "OAuth clients",
    "rewind.sitepoller": "Site pollers",
    "rewind.workerheartbeat": "Workers",
    "rewind.brokeroutage": "Task queue outages",
    "rewind.auditevent": "Audit log",
    "rewind.upstream": "Upstream MCP servers",
    "rewind.upstreamtool": "Upstream tools (exposed names)",
    "rewind.gatewaycall": "Calls through the gateway",
    "rewind.upstreamlink": "Upstream sessions by process",
    "axes.accessattempt": "Failed sign-ins (lock-outs)",
    "axes.accessfailurelog": "Sign-in failures",
    "axes.accesslog": "Sign-ins",
}

_BY_KEY = {g.key: g for g in (*GROUPS, OTHER)}
_BY_MODEL = {label: g for g in GROUPS for label in g.models}


def _label(model: type[Model]) -> str:
    return model._meta.label_lower


def group_of(model: type[Model], model_admin: admin.ModelAdmin | None = None) -> Group:
    chosen = getattr(model_admin, "operator_group", None)
    if chosen in _BY_KEY:
        return _BY_KEY[chosen]
    if _label(model) in _BY_MODEL:
        return _BY_MODEL[_label(model)]
    module = model.__module__
    matches = [(len(p), g) for g in GROUPS for p in g.parts if module == p or module.startswith(p + ".")]
    return max(matches, key=lambda m: m[0])[1] if matches else OTHER


def _position(group: Group, label: str) -> tuple[int, str]:
    return (group.models.index(label), "") if label in group.models else (len(group.models), label)


def relabel(model_dict: dict[str, Any]) -> dict[str, Any]:
    label = _label(model_dict["model"])
    return {**model_dict, "name": LABELS.get(label, model_dict["name"])}


def visible(app_list: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Django's app list without the framework's internals, in the product's words (one app's page)."""
    return [
        {**app, "models": [relabel(m) for m in app["models"]]}
        for app in app_list
        if app["app_label"] not in HIDDEN_APPS
    ]


def operator_groups(
    app_list: list[dict[str, Any]], registry: dict[type[Model], admin.ModelAdmin]
) -> list[dict[str, Any]]:
    """Django's app list regrouped: one entry per group with models, in ``GROUPS`` order, then "More"."""
    found: dict[str, list[dict[str, Any]]] = {}
    for app in visible(app_list):
        for model_dict in app["models"]:
            group = group_of(model_dict["model"], registry.get(model_dict["model"]))
            found.setdefault(group.key, []).append(model_dict)
    out = []
    for group in (*GROUPS, OTHER):
        models = found.get(group.key)
        if not models:
            continue
        models.sort(key=lambda m: _position(group, _label(m["model"])))
        out.append(
            {
                "name": group.name,
                "app_label": group.key,
                "app_url": "",  # a group is no Django app: it has no page of its own
                "has_module_perms": True,
                "models": models,
            }
        )
    return out
