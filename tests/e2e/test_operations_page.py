"""The operator's front page in Chromium: a superuser signs in to the admin and reads,
under "GPUaaS operations", counts that match the database (nodes by flavor and state,
offline agents, failed and stuck allocations, dead letters, firing alerts); a count
opens the list it counts. The fleet charts draw the GPUs by temperature band and the
open XID events from the embedded metrics store, under the strict CSP.

Set ``GPUAAS_E2E_SCREENSHOTS=/some/dir`` to keep a screenshot of the page."""

from __future__ import annotations

import os
import re
from pathlib import Path

from django.utils import timezone

from apps.allocations.models import Allocation, Node
from apps.monitoring.models import Alert, GpuSample, XidEvent
from apps.webhooks.models import Delivery
from tests.factories import FlavorFactory, UserFactory
from tests.support.fleet import troubled_fleet

SCREENSHOTS = os.environ.get("GPUAAS_E2E_SCREENSHOTS")


def sign_in_to_the_admin(page, portal) -> None:
    UserFactory(username="root", is_superuser=True, is_staff=True)
    page.goto(f"{portal.url}/admin/login/")
    page.fill("input[name=username]", "root")
    page.fill("input[name=password]", "pw")
    page.click("input[type=submit]")
    page.wait_for_url(f"{portal.url}/admin/")


def _cells(row: str) -> list[str]:
    return [cell.strip() for cell in row.split("\t")]


def test_the_operator_front_pages_counts_match_the_database(portal, page, settings):
    settings.METRICS_URL = ""
    troubled_fleet([FlavorFactory(name="h100-8x"), FlavorFactory(name="a100-4x")], per_state=2)
    sign_in_to_the_admin(page, portal)
    assert page.get_by_role("link", name="GPUaaS operations").is_visible()

    attention = page.get_by_role("table", name="Needs attention")
    seen = {
        label: int(attention.get_by_role("row", name=label).get_by_role("link").inner_text())
        for label in (
            "Offline agents",
            "Failed allocations",
            "Stuck allocations",
            "Dead letters",
            "Firing alerts",
        )
    }
    in_flight_with_a_lapsed_lease = Allocation.objects.filter(
        state__in=Allocation.IN_FLIGHT_STATES, lease_until__lt=timezone.now()
    )
    assert seen == {
        "Offline agents": Node.objects.filter(agent_offline=True).count(),
        "Failed allocations": Allocation.objects.filter(state=Allocation.State.FAILED).count(),
        "Stuck allocations": in_flight_with_a_lapsed_lease.count(),
        "Dead letters": Delivery.objects.filter(status=Delivery.Status.DEAD).count(),
        "Firing alerts": Alert.objects.filter(state=Alert.State.FIRING).count(),
    }
    assert seen["Failed allocations"] == 2

    nodes = page.get_by_role("table", name="Nodes by flavor and state")
    header, *rows = (_cells(row) for row in nodes.get_by_role("row").all_inner_texts())
    header = [cell.lower() for cell in header]  # the admin's style writes column heads in capitals
    assert header[0] == "flavor"
    assert header[-1] == "total"
    states = {state.label.lower(): state for state in Node.State}
    assert sorted(row[0] for row in rows) == ["a100-4x", "h100-8x"]
    for flavor, *counts, total in rows:
        for label, count in zip(header[1:-1], counts, strict=True):
            assert int(count) == Node.objects.filter(flavor__name=flavor, state=states[label]).count()
        assert int(total) == Node.objects.filter(flavor__name=flavor).count()

    # The temperature chart and its table: each GPU's reading, counted into the rules' bands.
    figure = page.get_by_role("figure", name="GPUs by temperature band")
    page.locator('[data-fleet-chart][data-loaded="true"]').first.wait_for()
    assert figure.locator("canvas").count() == 1
    bands = dict(_cells(row) for row in figure.get_by_role("row").all_inner_texts()[1:])
    temperatures = list(GpuSample.objects.values_list("temperature", flat=True))
    assert bands == {
        "under 60 °C": str(sum(t <= 60 for t in temperatures)),
        "60 to 80 °C": str(sum(60 < t <= 80 for t in temperatures)),
        "80 to 90 °C": str(sum(80 < t <= 90 for t in temperatures)),
        "over 90 °C": str(sum(t > 90 for t in temperatures)),
    }
    xids = page.get_by_role("figure", name="Open XID events by code")
    assert xids.locator("canvas").count() == 1
    for code, _severity, _meaning, gpus, _occurrences in (
        _cells(row) for row in xids.get_by_role("row").all_inner_texts()[1:]
    ):
        assert int(gpus) == XidEvent.objects.filter(code=code, resolved_at__isnull=True).count()
    if SCREENSHOTS:
        page.screenshot(path=str(Path(SCREENSHOTS) / "operations.png"), full_page=True)
    assert page.js_errors == []

    # A count opens the list it counts, filtered.
    attention.get_by_role("row", name="Failed allocations").get_by_role("link").click()
    page.wait_for_url(re.compile(r"/admin/allocations/allocation/\?state__exact=FAILED$"))
    results = page.locator("#result_list tbody tr")
    assert results.count() == seen["Failed allocations"]
    assert all("Failed" in row for row in results.all_inner_texts())
    # Ticking a row counts it: the list's script and its translations (/admin/jsi18n/) ran.
    page.locator("#result_list tbody input.action-select").first.check()
    assert page.locator(".action-counter").inner_text().startswith("1 of")
    assert page.js_errors == []
