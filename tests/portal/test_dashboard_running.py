"""The dashboard says what the caller has now (a tile per live node and app, with its
cost so far and an Open button), or what to do first; every running instance opens
from its page and its list row through the launcher; the same-origin warning is for
apps the platform does not ship and trust."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.urls import reverse
from django.utils import timezone

from apps.allocations.models import Node
from apps.catalog import services as catalog
from apps.catalog.models import App
from apps.core.models import AuditEvent
from apps.tenancy import principal as principals
from tests.factories import AllocationFactory, shipped_manifest
from tests.support.catalog import publish
from tests.support.proxy import proxied_manifest, start_instance

pytestmark = pytest.mark.django_db

SHARED_ORIGIN = "served from the portal's own address"


@pytest.fixture
def allocation(allocator, project, nodes):
    """An ACTIVE h100-8x node (98.32 a node-hour, no dated rate) of the project, up for
    two hours; the clock stands still meanwhile, so its cost does too."""
    with time_machine.travel(timezone.now(), tick=False):
        yield AllocationFactory(
            node=nodes[0], project=project, activated_at=timezone.now() - timedelta(hours=2)
        )


def running(user, project, allocation, slug="jupyterlab", manifest=None, name="JupyterLab"):
    """``slug`` launched on ``allocation`` and reported running by the node's agent (played here)."""
    Node.objects.filter(pk=allocation.node_id).update(credential_hash="0" * 64, agent_address="127.0.0.1")
    allocation.node.refresh_from_db()
    app = App.objects.filter(slug=slug).first() or publish(slug, manifest, name=name)
    return start_instance(user, project, allocation, app, host="127.0.0.1", port=41234)


def test_an_empty_dashboard_says_to_allocate_first(as_user, allocator, project):
    body = as_user(allocator).get("/").content.decode()
    assert 'data-empty="running"' in body
    assert "Start by allocating a GPU node in <strong>Cell 1</strong>" in body
    assert (
        body.count(f'href="{reverse("allocation_create", args=[project.pk])}"') == 2
    )  # header and empty state


def test_a_viewer_is_told_who_allocates(as_user, viewer, ready_tenant):
    body = as_user(viewer).get("/").content.decode()
    assert 'data-empty="running"' in body
    assert "ask your project administrator" in body
    assert "/allocations/new/" not in body


def test_tiles_show_the_node_its_cost_so_far_and_open_the_app(as_user, allocator, project, allocation):
    instance = running(allocator, project, allocation)
    body = as_user(allocator).get("/").content.decode()
    assert 'data-empty="running"' not in body
    assert f'data-allocation-id="{allocation.pk}" data-state="ACTIVE"' in body
    assert '<dd data-field="gpus">8 &times; H100</dd>' in body
    assert '<dd class="num" data-field="accrued">$196.64</dd>' in body  # 2 hours at 98.32
    assert '<time datetime="' in body.split('data-field="uptime"')[1].split("</dd>")[0]
    launcher = reverse("instance_open", args=[project.pk, instance.pk, "web"])
    assert f'href="{launcher}" target="_blank" rel="noopener" data-open-app>Open JupyterLab</a>' in body


def test_an_app_not_running_has_no_open_button(as_user, allocator, project, allocation):
    instance = running(allocator, project, allocation)
    type(instance).objects.filter(pk=instance.pk).update(state="stopping")
    client = as_user(allocator)
    assert "data-open-app" not in client.get("/").content.decode()
    assert "data-open-app" not in client.get(reverse("instance_list", args=[project.pk])).content.decode()


def test_a_running_instance_opens_from_its_overview_and_its_row(as_user, allocator, project, allocation):
    instance = running(allocator, project, allocation)
    client = as_user(allocator)
    launcher = reverse("instance_open", args=[project.pk, instance.pk, "web"])
    overview = client.get(reverse("instance_detail", args=[project.pk, instance.pk])).content.decode()
    assert (
        f'<a class="btn btn-primary" href="{launcher}" target="_blank" rel="noopener" data-open-app>'
        in overview
    )
    assert "Open JupyterLab</a>" in overview
    assert "Its node has cost <strong>$196.64</strong> so far." in overview
    rows = client.get(reverse("instance_list", args=[project.pk])).content.decode()
    assert f'href="{launcher}"' in rows
    detail = client.get(reverse("allocation_detail", args=[project.pk, allocation.pk])).content.decode()
    assert '<dd data-field="accrued">$196.64 <span class="muted small">at $98.32/h</span></dd>' in detail
    app_tab = client.get(
        reverse("instance_detail", args=[project.pk, instance.pk]) + "?tab=app"
    ).content.decode()
    assert "data-maximize" in app_tab


def test_the_same_origin_warning_is_for_apps_the_platform_does_not_ship(
    as_user, allocator, platform_admin, project, nodes
):
    client = as_user(allocator)

    def access_tab(instance):
        url = reverse("instance_detail", args=[project.pk, instance.pk]) + "?tab=access"
        return client.get(url).content.decode()

    shipped = running(allocator, project, AllocationFactory(node=nodes[0], project=project))
    assert SHARED_ORIGIN not in access_tab(shipped)

    other = AllocationFactory(node=nodes[1], project=project)
    third_party = running(allocator, project, other, "webapp", proxied_manifest(), name="Web app")
    assert SHARED_ORIGIN in access_tab(third_party)

    # An operator's own version under the shipped app's name is not the platform's.
    app = App.objects.get(slug="jupyterlab")
    catalog.publish_version(
        principals.for_user(platform_admin), app, version="9.0.0", manifest=shipped_manifest("jupyterlab")
    )
    operators = running(allocator, project, AllocationFactory(node=nodes[2], project=project))
    assert operators.app_version.version == "9.0.0"
    assert SHARED_ORIGIN in access_tab(operators)


def test_recent_activity_folds_repeated_proxy_sessions(as_user, tenant_admin, project):
    def event(action, target="i-1"):
        AuditEvent.objects.create(
            actor="alice",
            actor_type="user",
            action=action,
            target_type="app_instance",
            target_id=target,
            outcome="success",
            correlation_id="c",
            tenant_id=project.tenant_id,
            project_id=project.pk,
        )

    event("member.add", "m-1")
    for _ in range(5):
        event("proxy.session.issue")
    event("proxy.session.issue", "i-2")
    body = as_user(tenant_admin).get("/").content.decode()
    recent = body.split("Recent activity")[1]
    assert recent.count("proxy.session.issue") == 2  # one row per instance opened
    assert 'title="5 times in a row">&times;5</span>' in recent
    assert "member.add" in recent


def test_spend_this_month_links_to_the_usage_page(as_user, billing_admin, tenant, project_admin):
    dashboard = as_user(billing_admin).get("/").content.decode()
    spend_url = reverse("tenant_spend", args=[tenant.tenant_id])
    assert f'hx-get="{spend_url}"' in dashboard
    fragment = as_user(billing_admin).get(spend_url).content.decode()
    assert f'href="{reverse("tenant_usage", args=[tenant.tenant_id])}?month=' in fragment
    assert '<span class="spend-value num">$0.00</span>' in fragment
    assert as_user(project_admin).get(spend_url).status_code in (403, 404)
