from __future__ import annotations

from rest_framework import serializers


class _Name(serializers.CharField):
    """A name sent as a JSON string: DRF's CharField would take the number 5 as "5"."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class UiSessionRequestSerializer(serializers.Serializer):
    endpoint = _Name(
        required=False,
        help_text="the endpoint's name in the app's manifest; left out, the first one behind the proxy",
    )
