"""The tenant's quota dashboard: for each resource its limit, what is used and the
percent, with the 80 % and 90 % warnings said in words, not colour alone."""

from __future__ import annotations

import re

import pytest

from apps.core import simulation
from apps.storage import services as storage
from apps.tenancy import quotas
from tests.factories import AllocationFactory, FlavorFactory
from tests.support.members import member

pytestmark = pytest.mark.django_db


@pytest.fixture
def filling(project):
    """GPUs at 80 %, storage at 95 %, nodes low, app instances unlimited."""
    tenant = project.tenant
    flavor = FlavorFactory(name="h100-8x")
    for _ in range(2):
        AllocationFactory(project=project, node__flavor=flavor)
    directory = storage.provision_tenant_storage(tenant, quota_gb=950)
    with simulation.locked("ddn", "directory", directory.path) as state:
        simulation.update(state, used_bytes=475 * 2**30)  # half full
    quotas.set_quota(tenant, {"gpus": 20, "nodes": 10, "storage_gb": 1000})
    return tenant


def test_a_tenant_admin_sees_each_resource_with_its_warning(as_user, tenant_admin, filling):
    client = as_user(tenant_admin)
    assert "/tenants/acme/quota/" in client.get("/").content.decode()
    page = client.get("/tenants/acme/quota/")
    assert page.status_code == 200
    text = page.content.decode()
    assert 'data-resource="gpus" data-warning="80"' in text
    assert 'data-resource="storage_gb" data-warning="90"' in text
    assert 'data-resource="nodes" data-warning="none"' in text
    assert "Warning: 80 % of the limit or more" in text
    assert "Critical: 90 % of the limit or more" in text
    assert "Within quota" in text
    assert "GPUs at 80.0 %, Storage (GB) at 95.0 % of the limit." in " ".join(text.split())
    assert 'role="status"' in text
    assert cells(text, "gpus") == ["16", "20", "80.0 %", "Warning: 80 % of the limit or more"]
    assert cells(text, "storage_gb") == ["950", "1,000", "95.0 %", "Critical: 90 % of the limit or more"]
    assert cells(text, "storage_used_gb") == ["475", "950", "50.0 %", "Within quota"]
    assert "Storage used (GB of the directory)" in text


def cells(page: str, resource: str) -> list[str]:
    """The used, limit, percent and state cells of a resource's row, as text."""
    row = re.search(rf'data-resource="{resource}".*?</tr>', page, re.S).group(0)
    return [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]


def test_the_live_refresh_gets_the_table_alone(as_user, tenant_admin, filling):
    fragment = as_user(tenant_admin).get(
        "/tenants/acme/quota/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="quota-table"
    )
    assert fragment.status_code == 200
    text = fragment.content.decode()
    assert "<html" not in text
    assert 'data-resource="gpus"' in text
    assert "no-cache" in fragment["Cache-Control"]


def test_no_warning_says_so(as_user, tenant_admin, project):
    quotas.set_quota(project.tenant, {"gpus": 64})
    text = as_user(tenant_admin).get("/tenants/acme/quota/").content.decode()
    assert "Every resource is below 80 % of its limit." in text


def test_the_page_is_for_tenant_wide_roles_of_that_tenant(as_user, project, outsider, filling):
    # As CCP's quota API: a project's role sees its tenant but not the tenant's quota.
    viewer = as_user(member("viewer", project=project))
    assert viewer.get("/tenants/acme/quota/").status_code == 403
    assert "/tenants/acme/quota/" not in viewer.get("/").content.decode()
    assert as_user(outsider).get("/tenants/acme/quota/").status_code == 404
    assert (
        as_user(member("billing_admin", tenant=project.tenant)).get("/tenants/acme/quota/").status_code == 200
    )


def test_the_dashboard_gauges_each_quota_and_link_to_the_quota_page(as_user, tenant_admin, filling):
    client = as_user(tenant_admin)
    dashboard = client.get("/").content.decode()
    assert 'hx-get="/tenants/acme/quota/gauges/" hx-trigger="load"' in dashboard
    gauges = client.get("/tenants/acme/quota/gauges/", headers={"HX-Request": "true"})
    assert gauges.status_code == 200
    text = " ".join(gauges.content.decode().split())
    assert '<li class="quota-gauge quota-80" data-resource="gpus" data-warning="80">' in text
    assert "16 of 20 (80.0 %)" in text
    assert "950 of 1,000 (95.0 %)" in text
    assert "Critical: 90 % of the limit or more" in text
    assert text.count('href="/tenants/acme/quota/"') == len(re.findall(r'data-resource="', text))


def test_the_gauges_answer_only_who_may_see_the_quota(as_user, project, outsider, filling):
    assert as_user(outsider).get("/tenants/acme/quota/gauges/").status_code == 404
    viewer = as_user(member("viewer", project=project))
    assert viewer.get("/tenants/acme/quota/gauges/").status_code == 403
    assert "/quota/gauges/" not in viewer.get("/").content.decode()
