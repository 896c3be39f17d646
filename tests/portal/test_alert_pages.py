"""Alerts in the portal: the dashboard's firing alerts, the allocation page's, and
the alerts page (paged, filtered), each showing only the caller's tenant."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.allocations.models import Allocation
from apps.monitoring.alerts import services
from tests.monitoring.alerting import Rounds, held_fleet
from tests.support.pages import HTMX

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("shipped_alert_rules")]


@pytest.fixture
def fired(project, other_tenant_project, flavor, tenant, django_capture_on_commit_callbacks):
    """A critical CPU alert on acme's node 0 and on globex's node; 60 storage latency
    warnings of acme's DDN paths."""
    fleet = held_fleet(project, other_tenant_project, flavor)
    for node in (fleet[0], fleet[2]):
        services.record_measurement("cpu_utilization", str(node.pk), 99.0, node=node, label=node.hostname)
    for index in range(60):
        services.record_measurement(
            "storage_latency", f"ddn-{index}", 12.0, tenant=tenant, label=f"/lustre/{index}"
        )
    Rounds(django_capture_on_commit_callbacks).at(0)
    return fleet


def test_the_dashboard_shows_the_tenants_firing_alerts(as_user, tenant_admin, fired):
    page = as_user(tenant_admin).get(reverse("dashboard")).content.decode()
    assert "Firing alerts" in page
    assert page.count("<tr>") >= 5
    assert fired[2].hostname not in page  # globex's


def test_the_allocation_page_shows_its_alerts(as_user, tenant_admin, project, fired):
    allocation = Allocation.objects.get(node=fired[0])
    page = (
        as_user(tenant_admin)
        .get(reverse("allocation_detail", args=[project.pk, allocation.pk]))
        .content.decode()
    )
    assert "cpu_utilization_critical" in page
    assert fired[0].hostname in page
    assert "storage_latency_warning" not in page  # not this allocation's


def test_the_alerts_page_pages_and_filters(as_user, tenant_admin, fired):
    client = as_user(tenant_admin)
    first = client.get(reverse("alert_list")).content.decode()
    assert "Page 1 of 2" in first
    assert fired[2].hostname not in first
    critical = client.get(reverse("alert_list"), {"severity": "critical"}, **HTMX).content.decode()
    assert '<td class="mono">cpu_utilization_critical</td>' in critical
    assert "storage_latency_warning" not in critical
    assert "Page 1 of" not in critical
    none = client.get(reverse("alert_list"), {"state": "resolved"}, **HTMX).content.decode()
    assert "No alert matches these filters." in none
    assert "<html" not in none  # the fragment only
    ignored = client.get(reverse("alert_list"), {"state": "bogus"}).content.decode()
    assert "Page 1 of 2" in ignored


def test_the_operator_sees_every_tenant_and_filters_by_tenant(as_user, platform_admin, fired):
    client = as_user(platform_admin)
    page = client.get(reverse("alert_list"), {"rule": "cpu_utilization_critical"}).content.decode()
    assert fired[0].hostname in page
    assert fired[2].hostname in page
    page = client.get(
        reverse("alert_list"), {"rule": "cpu_utilization_critical", "tenant": "globex"}
    ).content.decode()
    assert fired[2].hostname in page
    assert fired[0].hostname not in page


def test_the_admin_lists_fleet_alerts_and_rules(as_user, platform_admin, fired):
    client = as_user(platform_admin)
    assert "cpu_utilization_critical" in client.get("/admin/monitoring/alert/").content.decode()
    rules = client.get("/admin/monitoring/alertrule/").content.decode()
    assert "gpu_temperature_warning" in rules


def test_an_operator_edits_a_rule_in_the_admin_audited(as_user, platform_admin):
    from apps.core.models import AuditEvent
    from apps.monitoring.models import AlertRule

    client = as_user(platform_admin)
    url = reverse("admin:monitoring_alertrule_change", args=["gpu_temperature_critical"])
    response = client.post(url, {"threshold": "88", "for_seconds": "60", "enabled": "on"})
    assert response.status_code == 302, response.content
    rule = AlertRule.objects.get(name="gpu_temperature_critical")
    assert (rule.threshold, rule.for_seconds, rule.enabled) == (88.0, 60, True)
    assert AuditEvent.objects.filter(
        action="admin.alertrule.change", target_id="gpu_temperature_critical"
    ).exists()
    assert client.get(reverse("admin:monitoring_alertrule_add")).status_code == 403
