"""Properties of the catalog matcher: an exact entry beats its server's ``server/*``, names match
without regard to case, a disabled entry matches nothing, and nothing else matches; the gateway's
one-statement read (``catalog_view``) finds the same entry."""

from __future__ import annotations

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalog.models import MutatingTool
from catalog.services import catalog_view, mutating_tool_match, normalize_tool_name
from tests.sizes import cases

part = st.from_regex(r"\A[a-z0-9_.-]{1,8}\Z")
entries = st.lists(
    st.tuples(part, st.one_of(st.just("*"), part), st.booleans()), max_size=8, unique_by=lambda e: (e[0], e[1])
)


@pytest.mark.django_db
@settings(
    max_examples=cases("REWIND_PROPERTY_EXAMPLES", full=200, quick=60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(catalog=entries, server=part, tool=part, upper=st.booleans())
def test_the_most_specific_enabled_entry_matches(
    catalog: list[tuple[str, str, bool]], server: str, tool: str, upper: bool
) -> None:
    with transaction.atomic():
        MutatingTool.objects.all().delete()
        for s, t, enabled in catalog:
            MutatingTool.objects.create(pattern=f"{s}/{t}", vm_arg="host", enabled=enabled)
        asked = f"{server}/{tool}".upper() if upper else f"{server}/{tool}"
        found = mutating_tool_match(normalize_tool_name(asked))
        listed = {f"{s}/{t}" for s, t, on in catalog if on}
        if f"{server}/{tool}" in listed:
            expected: str | None = f"{server}/{tool}"
        elif f"{server}/*" in listed:
            expected = f"{server}/*"
        else:
            expected = None
        assert (found.pattern if found else None) == expected
        viewed = catalog_view(normalize_tool_name(asked)).entry
        assert (viewed.pattern if viewed else None) == expected
        transaction.set_rollback(True)
