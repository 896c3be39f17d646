"""``GET /api/metrics/gpu/{tenant_id}`` (CONTRACT "Monitoring and alerts") against
both stores: who sees which tenant, windows and steps, the 11,000-point limit,
and attribution by the platform's allocation records across a release and the
node's re-allocation to another tenant.

The fleet and its three hours of readings, and the week of readings the windows are
read from, are made once for the module (each test in a savepoint of it) and given
to VictoriaMetrics once: tests read them and change nothing of them. Fed again for
each test, they took most of this module's time (2026-11-29)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest
from rest_framework.test import APIClient

from apps.allocations.models import Allocation
from apps.monitoring.metrics import embedded
from tests.factories import ProjectFactory, TenantFactory
from tests.support.fleet import acme, cell_1, h100_8x, made_allocation, make_nodes, ready
from tests.support.snapshots import fields_as_fixtures, fresh, made_once
from tests.support.telemetry import EmbeddedFeed, VictoriaFeed, readings

pytestmark = pytest.mark.django_db
INTEGRATION = {"roles": ["GPUaaS Platform Integration"]}
HOUR = 3600


def get_metrics(api, token, tenant_id="acme", **query):
    return api.get(f"/api/metrics/gpu/{tenant_id}", query, HTTP_AUTHORIZATION=f"Bearer {token}")


def ago(seconds: float) -> datetime:
    return datetime.now(UTC) - timedelta(seconds=seconds)


@dataclass
class Fleet:
    tenant: object  # acme, with projects cell-1 (project) and cell-2
    project: object
    other_tenant_project: object  # globex's g-1
    flavor: object
    held: dict  # project id: its ACTIVE allocation


def _reported_fleet() -> tuple[Fleet, dict]:
    """acme/cell-1 holds node 0 for the last 3 hours, acme/cell-2 node 1; globex node 2.
    Every node reported constant readings for the last 3 hours (to the embedded store
    here; the readings by node, for VictoriaMetrics)."""
    tenant = ready(acme())
    project = cell_1(tenant)
    other_project = ProjectFactory(tenant=tenant, project_id="cell-2", name="Cell 2")
    other_tenant_project = ProjectFactory(
        tenant=TenantFactory(tenant_id="globex", name="Globex"), project_id="g-1"
    )
    flavor = h100_8x()
    machines = make_nodes(flavor, 3, prefix="mon")
    held = {
        "cell-1": made_allocation(project, machines[0], flavor, ago(3 * HOUR), state=Allocation.State.ACTIVE),
        "cell-2": made_allocation(
            other_project, machines[1], flavor, ago(3 * HOUR), state=Allocation.State.ACTIVE
        ),
        "g-1": made_allocation(
            other_tenant_project, machines[2], flavor, ago(3 * HOUR), state=Allocation.State.ACTIVE
        ),
    }
    now = time.time()
    reported = {
        node: readings(now - 3 * HOUR, now, 30, temperature=40.0 + 10 * index)
        for index, node in enumerate(machines)
    }
    store = EmbeddedFeed(APIClient())
    for node, values in reported.items():
        store.feed(node, values)
    return Fleet(tenant, project, other_tenant_project, flavor, held), reported


@pytest.fixture(scope="module")
def module_fleet(django_db_setup, django_db_blocker):
    with made_once(django_db_blocker, _reported_fleet, METRICS_URL="") as made:
        yield made


@pytest.fixture(scope="module")
def fleet_in_victoria(victoria, module_fleet):
    """The fleet's readings, given to the session's VictoriaMetrics once a module."""
    store = VictoriaFeed(victoria)
    for node, values in module_fleet[1].items():
        store.feed(node, values)


@pytest.fixture
def fleet(db, module_fleet) -> Fleet:
    return fresh(module_fleet[0])


# The conftest's tenant, projects and flavor are the fleet's here (``viewer`` is a member
# of ``project``): there is one acme.
_SHARED = ("tenant", "project", "other_tenant_project", "flavor")
globals().update(fields_as_fixtures("fleet", **{name: name for name in _SHARED}))


@pytest.fixture
def reported(request, store, fleet):
    """The fleet's allocations, by project id, with its readings in the test's store."""
    if store.name == "victoria":
        request.getfixturevalue("fleet_in_victoria")
    return fleet.held


def series_of(body, **match):
    return [s for s in body["series"] if all(s[k] == v for k, v in match.items())]


def test_a_platform_caller_reads_any_tenant_and_gets_every_gpu_and_metric(api, ccp_issuer, reported):
    token = ccp_issuer.token(INTEGRATION)
    response = get_metrics(api, token)
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["tenant_id"], body["step"]) == ("acme", 60)
    start, end = datetime.fromisoformat(body["from"]), datetime.fromisoformat(body["to"])
    assert timedelta(minutes=59) <= end - start <= timedelta(hours=1)
    assert {s["project_id"] for s in body["series"]} == {"cell-1", "cell-2"}
    one = series_of(body, project_id="cell-1", gpu=1, metric="temperature")
    assert len(one) == 1
    assert one[0]["unit"] == "C"
    assert one[0]["allocation_id"] == str(reported["cell-1"].pk)
    assert one[0]["hostname"] == reported["cell-1"].node.hostname
    assert one[0]["uuid"] == "GPU-test-1"
    assert 55 <= len(one[0]["points"]) <= 61
    assert {value for _, value in one[0]["points"]} == {41.0}
    metrics = {(s["gpu"], s["metric"]) for s in series_of(body, project_id="cell-1")}
    assert metrics == {(g, m) for g in (0, 1) for m in ("utilization", "memory_used", "temperature", "power")}

    other = get_metrics(api, token, tenant_id="globex").json()
    assert {s["project_id"] for s in other["series"]} == {"g-1"}
    assert {v for _, v in series_of(other, gpu=0, metric="temperature")[0]["points"]} == {60.0}


@pytest.mark.parametrize(
    ("claims", "tenant_id", "status", "projects"),
    [
        ({"domain_id": "acme", "roles": ["Tenant Administrator"]}, "acme", 200, {"cell-1", "cell-2"}),
        ({"domain_id": "acme", "roles": ["Tenant Viewer"]}, "acme", 200, {"cell-1", "cell-2"}),
        ({"domain_id": "acme", "project_id": "cell-1", "roles": ["Cell Viewer"]}, "acme", 200, {"cell-1"}),
        ({"domain_id": "acme", "roles": ["Tenant Administrator"]}, "globex", 404, None),
        ({"domain_id": "globex", "roles": ["Tenant Super Administrator"]}, "acme", 404, None),
        ({"domain_id": "acme", "roles": ["Tenant Administrator"]}, "nobody", 404, None),
        (INTEGRATION, "nobody", 404, None),
    ],
)
def test_tenant_callers_see_only_their_own_tenant(
    api, ccp_issuer, reported, claims, tenant_id, status, projects
):
    response = get_metrics(api, ccp_issuer.token(claims), tenant_id=tenant_id)
    assert response.status_code == status, response.content
    if projects is None:
        assert response.json()["error"]["code"] == "not_found"
    else:
        assert {s["project_id"] for s in response.json()["series"]} == projects


def test_an_anonymous_caller_is_refused(api, fleet):
    response = api.get("/api/metrics/gpu/acme")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"


def test_a_portal_user_reads_their_tenant_with_their_session(api, reported, viewer, other_tenant_project):
    api.force_login(viewer)
    assert {s["project_id"] for s in api.get("/api/metrics/gpu/acme").json()["series"]} == {"cell-1"}
    assert api.get("/api/metrics/gpu/globex").status_code == 404


def test_project_and_node_filters(api, ccp_issuer, reported):
    token = ccp_issuer.token(INTEGRATION)
    body = get_metrics(api, token, project_id="cell-2").json()
    assert {s["project_id"] for s in body["series"]} == {"cell-2"}
    node = reported["cell-1"].node
    body = get_metrics(api, token, node_id=str(node.pk)).json()
    assert {s["node_id"] for s in body["series"]} == {str(node.pk)}
    # Another tenant's node, named explicitly, shows nothing.
    body = get_metrics(api, token, node_id=str(reported["g-1"].node_id)).json()
    assert body["series"] == []
    bad = get_metrics(api, token, node_id="not-a-node")
    assert (bad.status_code, bad.json()["error"]["code"]) == (400, "validation_error")


def _a_week_reported(flavor) -> tuple[float, object, list[dict]]:
    """hooli's node, held for 8 days, reported a reading a minute for the last week
    and 10 minutes, rolled up as the beat does; answers when it last reported, the
    node and its readings. A tenant of its own: its one series is the week's."""
    project = ProjectFactory(tenant=TenantFactory(tenant_id="hooli", name="Hooli"), project_id="h-1")
    [node] = make_nodes(flavor, 1, prefix="week")
    made_allocation(project, node, flavor, ago(8 * 24 * HOUR), state=Allocation.State.ACTIVE)
    now = time.time()
    values = readings(now - 7 * 24 * HOUR - 600, now, 60, gpus=1, utilization=70.0)
    EmbeddedFeed(APIClient()).feed(node, values)
    embedded.rollup()  # what the beat does every few minutes
    return now, node, values


@pytest.fixture(scope="module")
def module_week(module_fleet, django_db_blocker):
    # Made when the first test asks for it, in the module's transaction (a module's
    # fixtures are set up before a test's savepoint).
    flavor = module_fleet[0].flavor
    with made_once(django_db_blocker, lambda: _a_week_reported(flavor), METRICS_URL="") as made:
        yield made


@pytest.fixture(scope="module")
def week_in_victoria(victoria, module_week):
    _, node, values = module_week
    VictoriaFeed(victoria).feed(node, values)


@pytest.fixture
def week(request, store, module_week) -> float:
    """hooli's week of readings in the test's store; answers when the last was taken."""
    if store.name == "victoria":
        request.getfixturevalue("week_in_victoria")
    return module_week[0]


@pytest.mark.parametrize(
    ("window", "step", "most"), [(HOUR, 60, 61), (24 * HOUR, 600, 145), (7 * 24 * HOUR, 3600, 169)]
)
def test_windows_of_an_hour_a_day_and_a_week(api, ccp_issuer, week, window, step, most):
    now = week
    body = get_metrics(
        api,
        ccp_issuer.token(INTEGRATION),
        tenant_id="hooli",
        **{"from": str(int(now - window)), "to": str(int(now)), "step": str(step)},
    ).json()
    [utilization] = series_of(body, metric="utilization")
    points = utilization["points"]
    assert most - 3 <= len(points) <= most
    assert all(later - earlier == step for (earlier, _), (later, _) in pairwise(points))
    assert {value for _, value in points} == {70.0}


def test_iso_and_unix_bounds_answer_the_same(api, ccp_issuer, reported):
    token = ccp_issuer.token(INTEGRATION)
    end = int(time.time()) // 60 * 60
    unix = get_metrics(api, token, **{"from": str(end - 1800), "to": str(end)}).json()
    iso = get_metrics(
        api,
        token,
        **{
            "from": datetime.fromtimestamp(end - 1800, UTC).isoformat(),
            "to": datetime.fromtimestamp(end, UTC).isoformat().replace("+00:00", "Z"),
        },
    ).json()
    assert unix == iso
    assert (unix["from"], unix["to"]) == (
        datetime.fromtimestamp(end - 1800, UTC).isoformat(),
        datetime.fromtimestamp(end, UTC).isoformat(),
    )


def test_at_most_11000_points_a_series(api, ccp_issuer, reported):
    token = ccp_issuer.token(INTEGRATION)
    end = int(time.time()) // 60 * 60
    assert get_metrics(api, token, **{"from": str(end - 10_999 * 60), "to": str(end)}).status_code == 200
    response = get_metrics(api, token, **{"from": str(end - 11_000 * 60), "to": str(end)})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert "step" in error["details"]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        # ISO 8601 in form, not a moment: no 30th of February, no hour 25, no 99 h zone.
        ({"from": "2026-02-30T00:00:00Z"}, "from"),
        ({"to": "2026-01-01T25:00:00+00:00"}, "to"),
        ({"from": "2026-01-01T00:00:00+99:00"}, "from"),
        # Moments no date can hold in UTC: year 0 and year 10000.
        ({"from": "0001-01-01T00:00:00+14:00", "step": "100000000000"}, "from"),
        ({"from": "9999-12-31T23:00:00-14:00", "to": "9999-12-31T23:59:59-14:00", "step": "3600"}, "to"),
        ({"from": "yesterday"}, "from"),
        ({"to": "2026-11-01T00:00:00"}, "to"),
        ({"step": "0"}, "step"),
        ({"step": "ten"}, "step"),
        ({"from": "1800000000", "to": "1700000000"}, "to"),
        ({"from": "1e300"}, "from"),
        ({"from": "nan"}, "from"),
        ({"from": "1800000001", "to": "1800000100", "step": "3600"}, "step"),
        ({"step": "1" + "0" * 400}, "step"),  # dividing by it overflowed a float (a 500)
    ],
)
def test_bad_windows_answer_the_error_envelope(api, ccp_issuer, fleet, query, field):
    # Refused before any store is asked: one run, on no readings.
    response = get_metrics(api, ccp_issuer.token(INTEGRATION), **query)
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["details"]


def test_samples_belong_to_a_tenant_only_while_its_allocation_held_the_node(api, ccp_issuer, store, flavor):
    """umbrella held the node from 3 h ago to 2 h ago; after its release initech got it.
    The store knows nothing of tenants (its tenant label is wrong on purpose). Tenants
    of their own: the fleet's acme and globex hold nodes of their own."""
    [node] = make_nodes(flavor, 1, prefix="shared")
    released, regiven = ago(2 * HOUR), ago(2 * HOUR - 300)
    first_project = ProjectFactory(
        tenant=TenantFactory(tenant_id="umbrella", name="Umbrella"), project_id="u-1"
    )
    first = made_allocation(first_project, node, flavor, ago(3 * HOUR), released)
    later_project = ProjectFactory(
        tenant=TenantFactory(tenant_id="initech", name="Initech"), project_id="i-1"
    )
    second = made_allocation(later_project, node, flavor, regiven, state=Allocation.State.ACTIVE)
    now = time.time()
    store.feed(node, readings(now - 4 * HOUR, now, 60, gpus=1))
    token = ccp_issuer.token(INTEGRATION)
    window = {"from": str(int(now - 4 * HOUR)), "to": str(int(now)), "step": "60"}

    before = get_metrics(api, token, tenant_id="umbrella", **window).json()
    assert {s["allocation_id"] for s in before["series"]} == {str(first.pk)}
    times = [t for s in before["series"] for t, _ in s["points"]]
    assert min(times) >= first.activated_at.timestamp() + 60
    assert max(times) <= released.timestamp() - 60
    assert len(series_of(before, metric="utilization")[0]["points"]) >= 55

    after = get_metrics(api, token, tenant_id="initech", **window).json()
    assert {s["allocation_id"] for s in after["series"]} == {str(second.pk)}
    assert min(t for s in after["series"] for t, _ in s["points"]) >= regiven.timestamp() + 60

    # Its own tenant admin sees the same: nothing of the time before its allocation.
    own = ccp_issuer.token({"domain_id": "initech", "roles": ["Tenant Administrator"]})
    assert get_metrics(api, own, tenant_id="initech", **window).json() == after


@pytest.mark.parametrize("store", ["victoria"], indirect=True)
def test_the_metrics_databases_password_is_in_no_log_line(api, ccp_issuer, settings, reported, caplog):
    settings.METRICS_URL = settings.METRICS_URL.replace("http://", "http://gpuaas:metrics-db-password@")
    caplog.set_level(logging.DEBUG)
    assert get_metrics(api, ccp_issuer.token(INTEGRATION)).status_code == 200
    assert "metrics-db-password" not in caplog.text
