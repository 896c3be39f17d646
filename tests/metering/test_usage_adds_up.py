"""Property: a window cut into any pieces has, piece by piece, exactly the usage of the
whole window, for every project, resource and flavor: no microsecond counted twice or
lost at a cut, whatever the allocations and storage resizes around it."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.metering.usage import lines
from apps.storage import services as storage
from apps.storage.models import StorageResize, TenantStorage
from tests.support.fleet import made_allocation, make_nodes

pytestmark = pytest.mark.django_db

START = datetime(2026, 8, 1, tzinfo=UTC)
SPAN = int(timedelta(days=92).total_seconds() * 1_000_000)  # microseconds: August to October


def at(microseconds: int) -> datetime:
    return START + timedelta(microseconds=microseconds)


@pytest.fixture
def world(ready_tenant, project, other_project, flavor, small_flavor):
    """Allocations starting and ending at odd microseconds, one never released, and a
    directory resized twice."""
    big, small = make_nodes(flavor, 3), make_nodes(small_flavor, 2, prefix="small")
    made_allocation(project, big[0], flavor, at(1_234_567), at(SPAN // 3 + 7))
    made_allocation(project, big[1], flavor, at(SPAN // 5 + 999_999), None, state="ACTIVE")
    made_allocation(other_project, big[2], flavor, at(SPAN // 2 + 1), at(SPAN // 2 + 86_400_000_001))
    made_allocation(other_project, small[0], small_flavor, at(3), at(SPAN - 5))
    made_allocation(project, small[1], small_flavor, at(SPAN // 7), at(SPAN // 7 + 1))  # one microsecond
    directory = storage.provision_tenant_storage(ready_tenant, quota_gb=700)
    TenantStorage.objects.filter(pk=directory.pk).update(created_at=at(SPAN // 11 + 13), quota_gb=1500)
    StorageResize.objects.create(
        storage=directory, from_gb=700, to_gb=300, resized_at=at(SPAN // 4 + 17), resized_by="t"
    )
    StorageResize.objects.create(
        storage=directory, from_gb=300, to_gb=1500, resized_at=at(SPAN // 3 * 2), resized_by="t"
    )
    return ready_tenant


def usage(tenant, start, end) -> Counter:
    found = Counter()
    for line in lines(tenant, start, end):
        key = (
            line.project.pk if line.project else None,
            line.resource,
            line.flavor.pk if line.flavor else None,
        )
        found[key] += line.seconds
    return found


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    bounds=st.lists(st.integers(min_value=0, max_value=SPAN), min_size=2, max_size=2, unique=True),
    cuts=st.lists(st.integers(min_value=1, max_value=SPAN - 1), max_size=8),
)
def test_the_pieces_of_a_window_add_up_to_the_whole_exactly(world, bounds, cuts):
    start, end = sorted(bounds)
    points = sorted({start, end} | {cut for cut in cuts if start < cut < end})
    pieces = Counter()
    for left, right in pairwise(points):
        pieces.update(usage(world, at(left), at(right)))
    whole = usage(world, at(start), at(end))
    assert +pieces == +whole
