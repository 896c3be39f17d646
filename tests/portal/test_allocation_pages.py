"""The allocation pages: who sees and does what, the live check's answers, and
allocate / release / abort through the forms (the pipeline runs eagerly on commit)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from apps.allocations.models import Allocation, Node
from apps.core.models import AuditEvent
from apps.tenancy import quotas
from tests.factories import AllocationFactory
from tests.support.fleet import make_nodes
from tests.support.members import member
from tests.support.pages import HTMX

ALLOCATION_LIST_BUDGET = 8  # session, user, grants, switcher, project, state counts, count, page
OK_VALUES = {"flavor": "h100-8x", "os_image": "ubuntu-22.04", "count": "1"}


@pytest.fixture
def allocator(ready_tenant, project, nodes):
    return member("project_admin", project=project)


@pytest.fixture
def allocation(project, nodes, ready_tenant):
    """An ACTIVE allocation of the first node."""
    return _allocation(project, nodes[0], Allocation.State.ACTIVE)


def _allocation(project, node, state, progress=100):
    return AllocationFactory(
        node=node, project=project, requested_by="someone", state=state, progress=progress
    )


def _urls(project, allocation):
    return {
        "list": reverse("allocation_list", args=[project.pk]),
        "detail": reverse("allocation_detail", args=[project.pk, allocation.pk]),
        "new": reverse("allocation_create", args=[project.pk]),
        "check": reverse("allocation_check", args=[project.pk]),
        "release": reverse("allocation_release", args=[project.pk, allocation.pk]),
    }


# --- who sees what -------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "page_status", "new_status"),
    [
        ("tenant_admin", 200, 200),
        ("project_admin", 200, 200),
        ("viewer", 200, 403),
        ("billing_admin", 403, 403),
        ("outsider", 404, 404),
    ],
)
def test_pages_by_role(role, page_status, new_status, as_user, project, allocation, other_tenant_project):
    user = (
        member("tenant_admin", tenant=other_tenant_project.tenant)
        if role == "outsider"
        else member(role, tenant=project.tenant)
        if role in ("tenant_admin", "billing_admin")
        else member(role, project=project)
    )
    urls = _urls(project, allocation)
    client = as_user(user)
    assert client.get(urls["list"]).status_code == page_status
    assert client.get(urls["detail"]).status_code == page_status
    assert client.get(urls["new"]).status_code == new_status
    assert client.get(urls["release"]).status_code == new_status


def test_viewer_sees_no_actions_and_is_refused_on_post(
    viewer, as_user, project, allocation, django_capture_on_commit_callbacks
):
    urls = _urls(project, allocation)
    client = as_user(viewer)
    listing = client.get(urls["list"]).content.decode()
    detail = client.get(urls["detail"]).content.decode()
    assert allocation.node.hostname in listing
    assert "Allocate nodes" not in listing
    assert "ACTIVE" in detail
    assert urls["release"] not in detail
    assert "btn-danger" not in detail

    with django_capture_on_commit_callbacks(execute=True):
        assert client.post(urls["new"], OK_VALUES).status_code == 403
        assert client.post(urls["check"], OK_VALUES, **HTMX).status_code == 403
        assert client.post(urls["release"], {"drain": "on"}).status_code == 403
    assert Allocation.objects.count() == 1
    allocation.refresh_from_db()
    assert allocation.state == Allocation.State.ACTIVE
    assert AuditEvent.objects.filter(actor=viewer.username, outcome="denied").exists()


def test_manager_sees_the_actions(allocator, as_user, project, allocation):
    urls = _urls(project, allocation)
    client = as_user(allocator)
    assert "Allocate nodes" in client.get(urls["list"]).content.decode()
    assert urls["release"] in client.get(urls["detail"]).content.decode()


def test_other_tenant_gets_404_everywhere(outsider, as_user, project, allocation, other_tenant_project):
    urls = _urls(project, allocation)
    client = as_user(outsider)
    for name in ("list", "detail", "new"):
        assert client.get(urls[name]).status_code == 404, name
    assert client.post(urls["release"], {"drain": "on"}).status_code == 404
    assert client.post(urls["check"], OK_VALUES).status_code == 404
    # Their own project's URL with this allocation's id: not theirs either.
    own = reverse("allocation_detail", args=[other_tenant_project.pk, allocation.pk])
    assert client.get(own).status_code == 404


def test_project_page_and_nav_link_to_allocations(allocator, as_user, project):
    client = as_user(allocator)
    url = reverse("allocation_list", args=[project.pk])
    page = client.get(reverse("project_detail", args=[project.pk])).content.decode()
    assert f'href="{url}"' in page  # the Allocations tab, and the nav (the project is now current)
    assert page.count(f'href="{url}"') == 2


# --- the list ------------------------------------------------------------------


def test_list_shows_rows_with_progress_for_in_flight_and_filters_by_state(allocator, as_user, project, nodes):
    active = _allocation(project, nodes[0], Allocation.State.ACTIVE)
    provisioning = _allocation(project, nodes[1], Allocation.State.PROVISIONING, progress=30)
    client = as_user(allocator)
    url = reverse("allocation_list", args=[project.pk])
    response = client.get(url)
    body = response.content.decode()
    # The live script's socket is same-origin: the strict CSP's connect-src 'self' covers it.
    assert "connect-src 'self'" in response["Content-Security-Policy"]
    assert f'id="allocation-row-{active.pk}"' in body
    assert f'id="allocation-row-{provisioning.pk}"' in body
    assert 'value="30" data-field="progress"' in body
    assert body.count("<progress") == 1
    assert 'class="badge badge-ok" data-field="state">ACTIVE' in body
    assert f'data-ws-url="/ws/projects/{project.pk}/allocations/"' in body
    assert " style=" not in body
    assert "<script>" not in body

    filtered = client.get(url + "?state=active", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="allocation-table")
    fragment = filtered.content.decode()
    assert "<html" not in fragment
    assert 'id="messages"' not in fragment  # a quiet refresh
    assert str(active.pk) in fragment
    assert str(provisioning.pk) not in fragment


def test_tab_fragment_for_htmx(allocator, as_user, project):
    body = as_user(allocator).get(reverse("allocation_list", args=[project.pk]), **HTMX).content.decode()
    assert body.lstrip().startswith('<nav class="tabs"')
    assert 'id="allocations"' in body


@pytest.mark.parametrize("rows", [5, 30])
def test_list_query_budget(rows, allocator, as_user, project, flavor, django_assert_max_num_queries):
    for node in make_nodes(flavor, rows, prefix="bulk"):
        _allocation(project, node, Allocation.State.PROVISIONING, progress=30)
    client = as_user(allocator)
    url = reverse("allocation_list", args=[project.pk])
    client.get(url)  # the session already names the current project
    with django_assert_max_num_queries(ALLOCATION_LIST_BUDGET):
        response = client.get(url)
    assert response.status_code == 200
    assert response.content.count(b'data-allocation-id="') == min(rows, 25)


def test_list_queries_do_not_grow_with_rows(allocator, as_user, project, flavor):
    client = as_user(allocator)
    url = reverse("allocation_list", args=[project.pk])
    counts = []
    for batch in (5, 25):
        for node in make_nodes(flavor, batch, prefix=f"b{batch}"):
            _allocation(project, node, Allocation.State.ACTIVE)
        client.get(url)
        with CaptureQueriesContext(connection) as queries:
            response = client.get(url)
        assert response.status_code == 200
        counts.append(len(queries))
    assert counts[0] == counts[1]


# --- the live check ------------------------------------------------------------


def _check(client, project, **values):
    response = client.post(reverse("allocation_check", args=[project.pk]), {**OK_VALUES, **values}, **HTMX)
    assert response.status_code == 200
    return response.content.decode()


def test_check_ok(allocator, as_user, project):
    body = _check(as_user(allocator), project)
    assert 'data-verdict="allowed"' in body
    assert "Can allocate</strong> 1 node" in body
    assert 'data-resource="gpus"' in body
    assert 'data-resource="nodes"' in body
    assert 'data-free-nodes="4"' in body
    # The submit button comes along out of band, enabled.
    assert 'id="allocation-submit" class="form-actions" hx-swap-oob="true"' in body
    assert "disabled" not in body
    assert "Allocate 1 node" in body
    assert Allocation.objects.count() == 0
    assert 'id="messages"' not in body  # the page's messages stay while the user types


def test_check_warns_near_the_limit(allocator, as_user, project, ready_tenant):
    quotas.set_quota(ready_tenant, {"gpus": 18})  # 8 of 18 = 44 %, 16 of 18 = 89 %
    client = as_user(allocator)
    assert 'class="quota-row quota-none" data-resource="gpus"' in _check(client, project)
    body = _check(client, project, count="2")
    assert 'class="quota-row quota-80" data-resource="gpus"' in body
    assert "89%" in body
    quotas.set_quota(ready_tenant, {"gpus": 16})
    body = _check(client, project, count="2")
    assert 'class="quota-row quota-90" data-resource="gpus"' in body
    assert 'data-verdict="allowed"' in body


def test_check_over_quota(allocator, as_user, project, ready_tenant):
    quotas.set_quota(ready_tenant, {"gpus": 16})
    body = _check(as_user(allocator), project, count="3")
    assert 'data-verdict="refused"' in body
    assert "Quota exceeded for gpus: 0 used of 16, 24 requested." in body
    assert 'class="quota-row quota-over" data-resource="gpus"' in body
    assert "Over the GPUs limit by 8." in body
    assert "disabled" in body


def test_check_without_capacity(allocator, as_user, project):
    body = _check(as_user(allocator), project, count="5")
    assert 'data-verdict="refused"' in body
    assert "Only 4 free h100-8x node(s); 5 requested." in body
    assert 'class="free-nodes error"' in body
    assert "disabled" in body


def test_check_with_invalid_values(allocator, as_user, project):
    body = _check(as_user(allocator), project, count="0", os_image="windows")
    assert 'data-verdict="invalid"' in body
    assert "disabled" in body
    assert "Nodes: Ensure this value is greater than or equal to 1." in body
    assert "OS image: Select a valid choice." in body


def test_allocate_page_shows_the_initial_check_and_free_counts(allocator, as_user, project):
    body = as_user(allocator).get(reverse("allocation_create", args=[project.pk])).content.decode()
    assert 'data-flavor="h100-8x"' in body
    assert '<dt>Free nodes</dt><dd data-field="free">4</dd>' in body
    assert 'id="allocation-plan"' in body
    assert 'data-verdict="allowed"' in body
    assert 'hx-post="' + reverse("allocation_check", args=[project.pk]) + '"' in body
    assert " style=" not in body


# --- allocate ------------------------------------------------------------------


def test_allocate_creates_and_redirects_to_the_detail(
    allocator, as_user, project, nodes, django_capture_on_commit_callbacks
):
    client = as_user(allocator)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("allocation_create", args=[project.pk]), OK_VALUES)
    allocation = Allocation.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("allocation_detail", args=[project.pk, allocation.pk])
    assert allocation.state == Allocation.State.ACTIVE  # the eager pipeline ran on commit
    assert AuditEvent.objects.filter(action="allocation.create", actor=allocator.username).exists()
    detail = client.get(response["Location"]).content.decode()
    assert "provisioning has started" in detail
    assert "ACTIVE" in detail
    assert 'data-step="provision:agent"' in detail
    # Steps in words; the pipeline's names stay in the markup and the admin.
    assert "<td>Installing the operating system</td>" in detail
    assert ">os_deploy<" not in detail


def test_allocate_under_htmx_answers_hx_redirect(
    allocator, as_user, project, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = as_user(allocator).post(
            reverse("allocation_create", args=[project.pk]), {**OK_VALUES, "count": "2"}, **HTMX
        )
    assert response.status_code == 200
    assert response["HX-Redirect"] == reverse("allocation_list", args=[project.pk])
    assert Allocation.objects.filter(state=Allocation.State.ACTIVE).count() == 2


def test_allocate_over_quota_shows_the_refusal_and_takes_nothing(allocator, as_user, project, ready_tenant):
    quotas.set_quota(ready_tenant, {"gpus": 8})
    client = as_user(allocator)
    url = reverse("allocation_create", args=[project.pk])
    response = client.post(url, {**OK_VALUES, "count": "2"})
    assert response.status_code == 422
    body = response.content.decode()
    assert 'class="form-errors"' in body
    assert "Quota exceeded for gpus: 0 of 8 used, 16 requested." in body
    assert Allocation.objects.count() == 0
    assert not Node.objects.exclude(state=Node.State.AVAILABLE).exists()
    assert AuditEvent.objects.filter(action="allocation.create", outcome="denied").exists()
    # Under htmx the form fragment comes back with a 200 so that htmx swaps it in.
    fragment = client.post(url, {**OK_VALUES, "count": "2"}, **HTMX)
    assert fragment.status_code == 200
    assert "Quota exceeded for gpus" in fragment.content.decode()


def test_allocate_without_a_free_node_is_a_conflict(allocator, as_user, project, nodes):
    Node.objects.filter(pk__in=[n.pk for n in nodes]).update(state=Node.State.MAINTENANCE)
    response = as_user(allocator).post(reverse("allocation_create", args=[project.pk]), OK_VALUES)
    assert response.status_code == 409
    body = response.content.decode()
    assert '<div class="form-errors" role="alert"><p>No free h100-8x node: 0 of 1 could be reserved.' in body
    # The conflict's details name the flavor as data, not as a value to correct.
    assert "field-error" not in body
    assert Allocation.objects.count() == 0


def test_allocate_validation_errors_on_the_fields(allocator, as_user, project):
    response = as_user(allocator).post(
        reverse("allocation_create", args=[project.pk]),
        {"flavor": "nope", "os_image": "ubuntu-22.04", "count": "99"},
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert Allocation.objects.count() == 0
    assert "Select a valid choice. nope is not one of the available choices." in body
    assert "Ensure this value is less than or equal to 64." in body


# --- release and abort ---------------------------------------------------------


def test_release_confirms_then_releases(allocator, as_user, project, django_capture_on_commit_callbacks):
    client = as_user(allocator)
    with django_capture_on_commit_callbacks(execute=True):
        client.post(reverse("allocation_create", args=[project.pk]), OK_VALUES)
    allocation = Allocation.objects.get(state=Allocation.State.ACTIVE)
    url = reverse("allocation_release", args=[project.pk, allocation.pk])
    confirm = client.get(url).content.decode()
    assert f"Release {allocation.node.hostname}?" in confirm
    assert 'id="id_drain" checked' in confirm
    assert 'name="erase_disk"' in confirm

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(url, {"drain": "on", "erase_disk": "on"})
    assert response.status_code == 302
    assert response["Location"] == reverse("allocation_detail", args=[project.pk, allocation.pk])
    allocation.refresh_from_db()
    assert allocation.state == Allocation.State.RELEASED
    assert allocation.erase_disk
    assert allocation.drain
    assert AuditEvent.objects.filter(action="allocation.release", actor=allocator.username).exists()
    detail = client.get(response["Location"]).content.decode()
    assert "Releasing" in detail
    assert "RELEASED" in detail
    assert url not in detail

    # Once released there is nothing to confirm.
    assert client.get(url).status_code == 302


def test_abort_while_provisioning(allocator, as_user, project, django_capture_on_commit_callbacks):
    client = as_user(allocator)
    with django_capture_on_commit_callbacks(execute=False):  # the pipeline has not started yet
        client.post(reverse("allocation_create", args=[project.pk]), OK_VALUES)
    allocation = Allocation.objects.get()
    assert allocation.state == Allocation.State.PENDING
    detail_url = reverse("allocation_detail", args=[project.pk, allocation.pk])
    url = reverse("allocation_release", args=[project.pk, allocation.pk])
    detail = client.get(detail_url).content.decode()
    assert ">Abort</a>" in detail
    assert "Release&hellip;" not in detail
    assert "Abort provisioning of" in client.get(url).content.decode()

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(url)
    assert response.status_code == 302
    allocation.refresh_from_db()
    assert allocation.state == Allocation.State.FAILED
    assert allocation.failure_reason == f"aborted by {allocator.username}"
    assert Node.objects.get(pk=allocation.node_id).state == Node.State.AVAILABLE  # given back
    assert AuditEvent.objects.filter(action="allocation.abort", actor=allocator.username).exists()
    detail = client.get(detail_url).content.decode()
    assert "Aborting" in detail
    assert f"aborted by {allocator.username}" in detail
    assert ">Abort</a>" not in detail


def test_release_of_a_failed_allocation_says_why(allocator, as_user, project, nodes):
    failed = _allocation(project, nodes[0], Allocation.State.FAILED, progress=30)
    client = as_user(allocator)
    response = client.post(reverse("allocation_release", args=[project.pk, failed.pk]), {"drain": "on"})
    assert response.status_code == 302
    assert "nothing to release" in client.get(response["Location"]).content.decode()


def test_detail_body_refresh_is_a_quiet_fragment(allocator, as_user, project, allocation):
    url = reverse("allocation_detail", args=[project.pk, allocation.pk])
    body = as_user(allocator).get(url, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="allocation-detail-body")
    text = body.content.decode()
    assert "<html" not in text
    assert 'id="messages"' not in text
    assert 'data-field="state"' in text
