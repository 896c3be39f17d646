"""An agent's GPU reading is taken as DRF's field by field validation takes it, whether
it goes the fast way (plain numbers in bounds) or DRF's own: the same values of the same
types, or a 400 naming the same fields."""

from __future__ import annotations

import math

import pytest
from rest_framework import serializers

from apps.runtime.api.agent import LAST_UNIX_SECOND, GpuReadingSerializer

PLAIN = {
    "gpu": 3,
    "uuid": "GPU-5a1f0e2c-0000-4b6e-9a3d-000000000001",
    "at": 1_764_400_000.25,
    "utilization": 50,
    "memory_used": 1000.5,
    "memory_free": 80000,
    "temperature": -50,
    "power": 10000.0,
}

CHANGES = [
    {},
    {"utilization": 100, "temperature": 200.0, "at": LAST_UNIX_SECOND},
    {"utilization": 100.0000001},
    {"temperature": -50.5},
    {"memory_used": -0.0},
    {"memory_used": 2**60},
    {"memory_free": 2**53 + 1},
    {"at": -1},
    {"at": LAST_UNIX_SECOND + 1},
    {"power": math.nan},
    {"power": math.inf},
    {"power": "300"},
    {"power": None},
    {"power": True},
    {"gpu": 1.0},
    {"gpu": True},
    {"gpu": "2"},
    {"gpu": -1},
    {"gpu": 10**6},
    {"uuid": ""},
    {"uuid": " GPU-1"},
    {"uuid": "GPU-é"},
    {"uuid": "GPU-\x00"},
    {"uuid": "G" * 64},
    {"uuid": "G" * 65},
    {"uuid": 7},
    {"extra": "ignored"},
]


def drf_way(data) -> tuple[dict | None, set[str]]:
    serializer = GpuReadingSerializer()
    try:
        return serializers.Serializer.to_internal_value(serializer, data), set()
    except serializers.ValidationError as error:
        return None, set(error.detail)


def taken(data) -> tuple[dict | None, set[str]]:
    serializer = GpuReadingSerializer(data=data)
    if serializer.is_valid():
        return dict(serializer.validated_data), set()
    return None, set(serializer.errors)


def typed(result):
    values, errors = result
    return ({k: (type(v), v) for k, v in values.items()} if values is not None else None), errors


@pytest.mark.parametrize("change", CHANGES, ids=lambda change: repr(change)[:40])
def test_a_reading_is_taken_as_drf_takes_it(change):
    data = {**PLAIN, **change}
    assert typed(taken(data)) == typed(drf_way(data))


@pytest.mark.parametrize("missing", sorted(PLAIN))
def test_a_reading_without_a_field_is_refused_naming_it(missing):
    data = {k: v for k, v in PLAIN.items() if k != missing}
    assert taken(data) == drf_way(data) == (None, {missing})
