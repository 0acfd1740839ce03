"""schemathesis against the whole OpenAPI schema: every operation, valid and invalid data, and the
stateful links it infers between operations (an agent created, then read, changed, given a token…).

Every answer must be no server error and as the schema documents it, and a request that was refused
(4xx) must have changed nothing: every table of ours is read before and after it and must be the
same. The operations that reach outside (a site's ZVM, an upstream MCP server: creating, changing or
checking one) get invalid data only, which must be refused before anything is asked: valid data
would send the tests to whatever addresses and commands were generated.

Sizes: ``REWIND_FUZZ_EXAMPLES`` examples per operation and mode (default 8) and as many stateful
scenarios; the test prints its case counts. ``REWIND_FUZZ_EXAMPLES=200`` is the long run.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import pytest
import schemathesis
from django.apps import apps
from django.test import Client
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from rewind.audit import Actor, audit_record
from rewind.checkpoints.models import ChangeGuard
from tests.sizes import cases

EXAMPLES = cases("REWIND_FUZZ_EXAMPLES", full=8, quick=3)
CSRF = "fuzzcsrftoken0123456789abcdefghi"  # 32 characters: a token Django's CSRF check takes as it is
# Operations whose valid data reaches outside (a ZVM, an upstream's URL or command).
OUTSIDE = {
    ("POST", "/api/sites/"),
    ("PUT", "/api/sites/{id}/"),
    ("PATCH", "/api/sites/{id}/"),
    ("POST", "/api/sites/{id}/check/"),
    ("POST", "/api/gateway/upstreams/"),
    ("PATCH", "/api/gateway/upstreams/{id}/"),
    ("POST", "/api/gateway/upstreams/{id}/check/"),
}
# Tables a request may touch without it being a change of state, and the heartbeat table, which the
# session's Celery workers write to every few seconds whatever the requests do.
NOT_STATE = {"django_session", "rewind_mcpratecall", "rewind_mcpratecount", "rewind_workerheartbeat"}


def _state() -> dict[str, str]:
    """A digest of every row of each table of ours and of the people's, by table."""
    state = {}
    for model in apps.get_models():
        if model._meta.app_label not in ("rewind", "catalog", "recoveries", "auth"):
            continue
        if model._meta.db_table in NOT_STATE:
            continue
        rows = model._default_manager.order_by("pk").values_list()
        state[model._meta.db_table] = hashlib.sha256(repr(list(rows)).encode()).hexdigest()
    return state


# "Valid data is accepted" cannot hold: the schema cannot say that text refuses NUL characters or that
# a name must be unique. "Invalid data is refused" is checked by the state check instead (schemathesis
# counts a value the schema leaves open, such as an extra query parameter, as invalid).
EXCLUDED_CHECKS = [positive_data_acceptance, negative_data_rejection]


@pytest.fixture
def session(live_server: Any, superuser: Any) -> dict[str, str]:
    client = Client()
    client.force_login(superuser)
    audit_record(actor=Actor.system("tests"), action="site.created", target=("site", "1"), data={"n": 1})
    ChangeGuard.objects.create(
        agent_name="fixer", action="edit", vm_identifier="vm-1", vm_name="web01", change_id="c-1", tag="t-1",
        timeout_s=300,
    )  # fmt: skip
    return {"Cookie": f"sessionid={client.cookies['sessionid'].value}; csrftoken={CSRF}", "X-CSRFToken": CSRF}


def _call_and_check(case: Any, base_url: str, headers: dict[str, str], counts: dict[str, int]) -> Any:
    before = _state()
    response = case.call(base_url=base_url, headers=headers)
    counts["cases"] += 1
    assert response.status_code < 500, f"{case.method} {case.formatted_path}: {response.status_code}"
    if response.status_code >= 400:
        counts["refused"] += 1
        after = _state()
        changed = sorted(table for table in after if after[table] != before.get(table))
        assert changed == [], f"{case.method} {case.formatted_path} was refused ({response.status_code}) but changed"
    return response


@pytest.mark.django_db(transaction=True)  # the live server's thread sees only committed rows
def test_every_operation_answers_as_documented_and_a_refusal_changes_nothing(
    live_server: Any, session: dict[str, str]
) -> None:
    api = schemathesis.openapi.from_dict(SchemaGenerator().get_schema(request=None, public=True))
    counts = {"cases": 0, "refused": 0, "operations": 0}
    started = time.monotonic()
    for result in api.get_all_operations():
        operation = result.ok()  # type: ignore[union-attr]  # an operation the schema cannot describe fails here
        modes = [GenerationMode.NEGATIVE]
        if (operation.method.upper(), operation.path) not in OUTSIDE:
            modes.insert(0, GenerationMode.POSITIVE)
        counts["operations"] += 1
        for mode in modes:

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
            def answers(case: Any) -> None:
                response = _call_and_check(case, live_server.url, session, counts)
                case.validate_response(response, excluded_checks=EXCLUDED_CHECKS)

            answers()
    print(
        f"\nschemathesis: {counts['operations']} operations, {counts['cases']} cases "
        f"({counts['refused']} refused, none changing state) in {time.monotonic() - started:.1f} s"
    )
    assert counts["operations"] == len(list(api.get_all_operations()))


@pytest.mark.django_db(transaction=True)
def test_the_stateful_links_hold(live_server: Any, session: dict[str, str]) -> None:
    api: Any = schemathesis.openapi.from_dict(SchemaGenerator().get_schema(request=None, public=True))
    for method, path in OUTSIDE:
        api = api.exclude(method=method, path=path)
    counts = {"cases": 0, "refused": 0}
    base_url = live_server.url

    class Workflow(api.as_state_machine()):  # type: ignore[misc]
        def call(self, case: Any, **kwargs: Any) -> Any:
            return _call_and_check(case, base_url, session, counts)

        def validate_response(self, response: Any, case: Any, additional_checks: Any = None, **kwargs: Any) -> None:
            case.validate_response(response, excluded_checks=EXCLUDED_CHECKS)

    started = time.monotonic()
    Workflow.run(
        settings=settings(
            max_examples=EXAMPLES, stateful_step_count=6, deadline=None, suppress_health_check=list(HealthCheck),
            database=None,
        )
    )  # fmt: skip
    print(
        f"\nschemathesis stateful: {counts['cases']} calls ({counts['refused']} refused) in {time.monotonic() - started:.1f} s"
    )
    assert counts["cases"] >= EXAMPLES
