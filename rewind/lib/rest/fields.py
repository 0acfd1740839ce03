"""Input fields the REST API shares beyond DRF's own."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


class StrictBooleanField(serializers.BooleanField):
    """JSON ``true`` or ``false`` only.

    DRF's ``BooleanField`` also takes "yes", "on", 1 or "0": a flag that writes into a guest must
    not be switched on by a value that only looks like one.
    """

    default_error_messages = {"invalid": "must be JSON true or false."}

    def to_internal_value(self, data: Any) -> bool:
        if isinstance(data, bool):
            return data
        self.fail("invalid")
