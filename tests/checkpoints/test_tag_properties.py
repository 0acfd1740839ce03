"""Properties of the checkpoint tag: always parseable back into its five fields, never over the limit,
no ``|`` or control character smuggled in by the action, the VM name or the change id."""

from __future__ import annotations

from datetime import UTC, datetime

from django.conf import settings as django_settings
from hypothesis import given, settings
from hypothesis import strategies as st

from rewind.checkpoints.tags import build_tag, clean_action, clean_change_id, tag_time
from rewind.lib.errors import ApplicationError

agents = st.from_regex(r"\A[-a-zA-Z0-9_]{1,64}\Z")  # an agent's name is a slug
anything = st.text(max_size=400)
moments = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC))


@settings(max_examples=400, deadline=None)
@given(
    agent=agents,
    action=anything,
    vm=st.text(min_size=1, max_size=120),
    change_id=st.one_of(st.none(), anything),
    now=moments,
)
def test_a_tag_parses_back_into_its_fields_and_fits(
    agent: str, action: str, vm: str, change_id: str | None, now: datetime
) -> None:
    try:
        cleaned, change = clean_action(action), clean_change_id(change_id)
        tag = build_tag(agent=agent, action=cleaned, vm=vm, change_id=change, now=now)
    except ApplicationError:
        return  # refused with a reason: nothing is tagged
    assert len(tag) <= min(django_settings.REWIND_TAG_MAX_LENGTH, 255)
    fields = tag.split(" | ")
    assert len(fields) == 5, tag
    assert fields[0] == f"ai:{agent}"
    assert fields[2].startswith("vm=")
    assert fields[3] == f"change={change}"
    assert fields[4] == tag_time(now)
    assert tag.count("|") == 4
    assert not any(ch in tag for ch in "\x00\n\r\t\u202e\u200b")
