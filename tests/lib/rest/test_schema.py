"""The OpenAPI schema (/api/schema/) and its docs page (/api/docs/)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import call_command
from django.urls import URLPattern, URLResolver, get_resolver

UNDOCUMENTED_METHODS = {"options", "head"}


def _routes(patterns: list[Any], prefix: str = "") -> dict[str, set[str]]:
    """Every route under ``patterns`` as the schema writes its path, with the methods its view handles."""
    out: dict[str, set[str]] = {}
    for entry in patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            out.update(_routes(entry.url_patterns, route))
        elif isinstance(entry, URLPattern):
            view = entry.callback.view_class  # type: ignore[attr-defined]
            methods = {m for m in view.http_method_names if hasattr(view, m)} - UNDOCUMENTED_METHODS
            # drf-spectacular names a "pk" path variable "id" (SCHEMA_COERCE_PATH_PK).
            path = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: "{" + ("id" if m[1] == "pk" else m[1]) + "}", route)
            out["/api/" + path] = methods
    return out


@pytest.fixture(scope="module")
def schema(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = Path(tmp_path_factory.mktemp("schema")) / "schema.yml"
    # --validate checks the result against the OpenAPI 3 specification; --fail-on-warn turns every
    # guess drf-spectacular had to make (an undeclared response, a serializer it could not name) into a failure.
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(path))
    return yaml.safe_load(path.read_text())


def test_it_validates_and_describes_every_route_of_the_api(schema: dict[str, Any]) -> None:
    routes = _routes(get_resolver("rewind.api_urls").url_patterns)
    assert len(routes) >= 17
    documented = {path: set(ops) for path, ops in schema["paths"].items()}
    assert documented == routes


def test_every_operation_names_its_permission_and_its_errors(schema: dict[str, Any]) -> None:
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            where = f"{method.upper()} {path}"
            assert "**Permission:** " in op["description"], where
            assert op["security"], where
            assert "403" in op["responses"], where
            if "{" in path:
                assert "404" in op["responses"], where
            if method != "get":
                assert "409" in op["responses"], where
            if "requestBody" in op:
                assert "400" in op["responses"], where


def test_it_describes_the_error_shape_and_both_ways_to_authenticate(schema: dict[str, Any]) -> None:
    assert schema["components"]["schemas"]["Error"]["required"] == ["detail"]
    assert set(schema["components"]["securitySchemes"]) == {"cookieAuth", "agentToken"}
    download = schema["paths"]["/api/recoveries/{id}/download/"]["get"]
    assert download["security"] == [{"agentToken": []}, {"cookieAuth": []}]
    assert "401" in download["responses"]
    approve = schema["paths"]["/api/recoveries/{id}/approve/"]["post"]
    assert approve["security"] == [{"cookieAuth": []}]  # an agent's token can never approve
    assert "recoveries.approve_recovery" in approve["description"]


def test_it_lists_the_filters_and_the_pagination_of_a_list(schema: dict[str, Any]) -> None:
    guards = schema["paths"]["/api/guards/"]["get"]
    names = {p["name"] for p in guards["parameters"]}
    assert names == {"agent", "vm", "status", "change_id", "limit", "offset"}
    assert guards["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("PaginatedGuardList")
    audit = {p["name"] for p in schema["paths"]["/api/audit/"]["get"]["parameters"]}
    assert {"cursor", "limit", "since", "action"} <= audit


def test_output_models_read_as_the_serializers_they_replaced(schema: dict[str, Any]) -> None:
    components = schema["components"]["schemas"]
    result = components["RecoveryResult"]
    # A key set only when it applies: not required, never null; one always there may be null.
    assert "url" not in result["required"]
    assert "nullable" not in result["properties"]["url"]
    assert result["properties"]["url"]["format"] == "uri"
    assert "sha256" in result["required"]
    assert result["properties"]["sha256"]["nullable"] is True
    assert "content" not in result["properties"]  # the agent's answer only
    # Nested models keep their component names, enums the names ENUM_NAME_OVERRIDES gives them.
    assert components["Recovery"]["properties"]["result"]["allOf"] == [{"$ref": "#/components/schemas/RecoveryResult"}]
    assert components["TaggedCheckpoint"]["properties"]["status"] == {
        "$ref": "#/components/schemas/TaggedCheckpointStatusEnum"
    }
    assert components["GuardStatusEnum"]["description"].startswith("* `pending`")
    # A row's help text documents its field; pydantic's titles and defaults stay out.
    assert components["Guard"]["properties"]["tool"]["description"] == "server/tool the agent was about to call"
    assert not any("title" in prop or "default" in prop for prop in components["Recovery"]["properties"].values())
    assert components["GuardDetail"]["properties"]["started_at"] == {
        "format": "date-time",
        "nullable": True,
        "type": "string",
    }


@pytest.mark.django_db
def test_anonymous_callers_get_neither_schema_nor_docs(client: Any) -> None:
    assert client.get("/api/schema/").status_code == 403
    response = client.get("/api/docs/")
    assert response.status_code == 302
    assert response["Location"] == "/admin/login/?next=/api/docs/"


@pytest.mark.django_db
def test_a_signed_in_user_gets_schema_and_docs(client: Any, viewer: Any) -> None:
    client.force_login(viewer)
    response = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    assert "/api/guards/" in response.json()["paths"]
    page = client.get("/api/docs/")
    assert page.status_code == 200
    html = page.content.decode()
    # Swagger UI from the package's own files: the deployment may have no internet.
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in html
    assert "cdn" not in html.lower()
    # The page's own script comes from a URL of its own: the content security policy allows no inline script.
    assert "<script>" not in html
    assert "<style>" not in html
    script = client.get("/api/docs/?script=")
    assert script["Content-Type"].startswith("application/javascript")
    assert "/api/schema/" in script.content.decode()


@pytest.mark.django_db
def test_a_setting_makes_schema_and_docs_public(client: Any, settings: Any) -> None:
    settings.REWIND_API_DOCS_PUBLIC = True
    assert client.get("/api/schema/").status_code == 200
    assert client.get("/api/docs/").status_code == 200
