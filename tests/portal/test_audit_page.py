from __future__ import annotations

import re
from datetime import UTC, datetime
from unittest import mock

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.core.models import AuditEvent
from tests.support.pages import HTMX
from tests.support.processes import free_port


def event(
    *,
    tenant=None,
    project=None,
    action="member.add",
    outcome="success",
    actor="alice",
    when=None,
    correlation_id="c-1",
):
    # The trail is append-only down to a database trigger: set the time as it is written.
    with mock.patch("django.utils.timezone.now", return_value=when or timezone.now()):
        return AuditEvent.objects.create(
            actor=actor,
            actor_type="user",
            action=action,
            outcome=outcome,
            correlation_id=correlation_id,
            tenant_id=tenant.pk if tenant else (project.tenant_id if project else None),
            project_id=project.pk if project else None,
            target_type="membership",
            target_id="t-1",
        )


def rows(response) -> str:
    return response.content.decode().split('id="audit-results"', 1)[-1]


@pytest.fixture
def trail(project, other_project, other_tenant_project):
    event(
        project=project,
        action="member.add",
        actor="alice",
        correlation_id="corr-a",
        when=datetime(2026, 3, 1, 12, tzinfo=UTC),
    )
    event(
        project=project,
        action="service_account.create",
        actor="bob",
        correlation_id="corr-b",
        when=datetime(2026, 3, 2, 9, tzinfo=UTC),
    )
    event(
        project=other_project,
        action="member.remove",
        outcome="denied",
        actor="carol",
        correlation_id="corr-c",
        when=datetime(2026, 3, 3, 23, 59, tzinfo=UTC),
    )
    event(
        tenant=project.tenant,
        action="tenant.active",
        actor="platform",
        correlation_id="corr-d",
        when=datetime(2026, 3, 4, tzinfo=UTC),
    )
    event(project=other_tenant_project, action="member.add", actor="mallory", correlation_id="corr-x")


def test_lists_only_the_callers_tenants(tenant_admin, as_user, trail):
    body = rows(as_user(tenant_admin).get(reverse("audit_log")))
    for corr in ("corr-a", "corr-b", "corr-c", "corr-d"):
        assert corr in body
    assert "corr-x" not in body
    assert "mallory" not in body


def test_action_suggestions_are_the_callers_own_though_kept_a_while(
    tenant_admin, platform_admin, as_user, trail, other_tenant_project
):
    event(project=other_tenant_project, action="secret.rotate", correlation_id="corr-y")
    assert "secret.rotate" in suggestions(as_user(platform_admin).get(reverse("audit_log")))
    tenants_own = suggestions(as_user(tenant_admin).get(reverse("audit_log")))
    assert "service_account.create" in tenants_own
    assert "secret.rotate" not in tenants_own
    # Kept for a few minutes: an action first seen since does not show yet.
    event(project=other_tenant_project, action="secret.delete", correlation_id="corr-z")
    assert "secret.delete" not in suggestions(as_user(platform_admin).get(reverse("audit_log")))


def test_the_page_does_without_its_suggestions_cache_while_redis_is_down(
    tenant_admin, as_user, trail, settings
):
    browser = as_user(tenant_admin)
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{free_port()}/0",
        }
    }
    response = browser.get(reverse("audit_log"))
    assert response.status_code == 200
    assert "member.add" in suggestions(response)


def suggestions(response) -> set[str]:
    """The actions the filter's field offers (its datalist)."""
    datalist = response.content.decode().split('<datalist id="audit-actions">', 1)[1].split("</datalist>")[0]
    return set(re.findall(r'<option value="([^"]+)">', datalist))


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("action=member.add", {"corr-a"}),
        ("outcome=denied", {"corr-c"}),
        ("actor=bob", {"corr-b"}),
        ("date_from=2026-03-02&date_to=2026-03-03", {"corr-b", "corr-c"}),
        ("date_to=2026-03-01", {"corr-a"}),
        ("date_from=2026-03-04", {"corr-d"}),
    ],
)
def test_filters(query, expected, tenant_admin, as_user, trail):
    body = rows(as_user(tenant_admin).get(reverse("audit_log") + "?" + query))
    shown = {corr for corr in ("corr-a", "corr-b", "corr-c", "corr-d", "corr-x") if corr in body}
    assert shown == expected


def test_project_filter(tenant_admin, as_user, trail, other_project):
    body = rows(as_user(tenant_admin).get(reverse("audit_log") + f"?project={other_project.pk}"))
    assert "corr-c" in body
    assert "corr-a" not in body


def test_project_filter_offers_only_visible_projects(tenant_admin, as_user, trail, other_tenant_project):
    body = as_user(tenant_admin).get(reverse("audit_log")).content.decode()
    assert "Cell 1" in body
    assert "Cell 2" in body
    assert str(other_tenant_project.pk) not in body


def test_foreign_project_filter_is_a_field_error(tenant_admin, as_user, trail, other_tenant_project):
    response = as_user(tenant_admin).get(reverse("audit_log") + f"?project={other_tenant_project.pk}")
    assert response.status_code == 200
    assert b"Select a valid choice" in response.content
    assert "corr-x" not in rows(response)


def test_bad_dates_are_field_errors(tenant_admin, as_user, trail):
    response = as_user(tenant_admin).get(reverse("audit_log") + "?date_from=2026-03-05&date_to=2026-03-01")
    assert b"Must be on or after the start date." in response.content
    response = as_user(tenant_admin).get(reverse("audit_log") + "?date_from=yesterday")
    assert b"Enter a valid date." in response.content


def test_no_match_shows_an_empty_state(tenant_admin, as_user, trail):
    body = rows(as_user(tenant_admin).get(reverse("audit_log") + "?actor=nobody"))
    assert "Nothing matches these filters." in body


def test_pagination_is_fifty_per_page_and_keeps_filters(tenant_admin, as_user, project):
    for n in range(120):
        event(
            project=project, action="member.add" if n % 2 else "member.remove", correlation_id=f"bulk-{n:03d}"
        )
    client = as_user(tenant_admin)
    first = rows(client.get(reverse("audit_log")))
    assert first.count("bulk-") == 50 * 2  # each id appears in the cell and its title
    assert "Page 1 of 3" in first
    assert "120 total" in first
    third = rows(client.get(reverse("audit_log") + "?page=3"))
    assert third.count("<tr>") - 1 == 20
    filtered = rows(client.get(reverse("audit_log") + "?action=member.add&page=2"))
    assert "Page 2 of 2" in filtered
    assert 'href="?action=member.add&amp;page=1"' in filtered


def test_htmx_filtering_answers_the_results_only(tenant_admin, as_user, trail):
    body = as_user(tenant_admin).get(reverse("audit_log") + "?actor=alice", **HTMX).content.decode()
    assert "<html" not in body
    assert "corr-a" in body
    assert "corr-b" not in body


def test_project_and_tenant_names_are_shown(tenant_admin, as_user, trail):
    body = rows(as_user(tenant_admin).get(reverse("audit_log")))
    assert "Cell 1" in body
    assert "Cell 2" in body
    assert "Acme" in body


def test_a_caller_without_audit_view_is_refused_and_the_refusal_recorded(viewer, as_user, trail):
    response = as_user(viewer).get(reverse("audit_log"))
    assert response.status_code == 403
    assert b"corr-a" not in response.content
    assert AuditEvent.objects.filter(actor=viewer.username, action="audit.view", outcome="denied").exists()
