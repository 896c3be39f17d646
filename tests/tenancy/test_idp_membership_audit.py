"""Roles an OIDC login mirrors from the IdP's claims are audited when they change:
``member.add``/``member.remove`` with source ``idp``, by the platform itself; a login
that confirms the same roles writes nothing."""

from __future__ import annotations

import pytest

from apps.core.models import AuditEvent
from apps.tenancy.auth.oidc import sync_memberships
from apps.tenancy.models import Membership
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


def membership_events():
    return list(
        AuditEvent.objects.filter(action__startswith="member.")
        .order_by("occurred_at")
        .values_list("action", "actor", "tenant_id", "project_id", "details")
    )


def test_a_granted_role_is_audited_once(tenant):
    user = UserFactory(username="alice")
    claims = {"sub": "alice", "domain_id": "acme", "roles": ["Tenant Administrator"]}

    sync_memberships(user, claims)
    sync_memberships(user, claims)  # the next login says the same

    assert membership_events() == [
        (
            "member.add",
            "platform",
            tenant.pk,
            None,
            {"user": "alice", "role": "tenant_admin", "limit": "", "source": "idp"},
        )
    ]
    event = AuditEvent.objects.get(action="member.add")
    assert event.actor_type == "system"
    assert event.correlation_id


def test_a_role_the_claims_no_longer_carry_is_removed_and_audited(project):
    user = UserFactory(username="bob")
    MembershipFactory(user=user, tenant=project.tenant, role="viewer")  # granted in the portal: kept
    sync_memberships(
        user, {"sub": "bob", "domain_id": "acme", "project_id": "cell-1", "roles": ["Cell VM Admin"]}
    )

    sync_memberships(user, {"sub": "bob", "domain_id": "acme", "project_id": "cell-1", "roles": []})

    assert [e[0] for e in membership_events()] == ["member.add", "member.remove"]
    removed = membership_events()[1]
    assert removed == (
        "member.remove",
        "platform",
        project.tenant_id,
        project.pk,
        {"user": "bob", "role": "project_admin", "limit": "compute", "source": "idp"},
    )
    assert list(Membership.objects.filter(user=user).values_list("role", "source")) == [("viewer", "local")]


def test_claims_that_grant_nothing_write_nothing(tenant):
    user = UserFactory()
    sync_memberships(user, {"sub": "x", "domain_id": "unknown-tenant", "roles": ["Tenant Administrator"]})
    sync_memberships(user, {"sub": "x", "domain_id": "acme", "roles": ["GPUaaS Platform Integration"]})
    assert membership_events() == []


@pytest.mark.parametrize(("realm", "roles"), [("acme", 1), ("initech", 0)])
def test_a_login_of_another_realm_gets_no_role_in_the_tenant(tenant, realm, roles):
    user = UserFactory(username="mallory")
    sync_memberships(
        user, {"sub": "mallory", "realm_name": realm, "domain_id": "acme", "roles": ["Tenant Administrator"]}
    )
    assert Membership.objects.filter(user=user, tenant=tenant).count() == roles
