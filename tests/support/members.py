"""People with a role: a user and the one membership that gives it to them."""

from __future__ import annotations

from rest_framework.test import APIClient

from apps.tenancy import principal as principals
from apps.tenancy import services as tenancy
from apps.tenancy.models import Membership
from tests.factories import UserFactory


def member(role: str, *, tenant=None, project=None, limit: str = "", username: str | None = None):
    """A new user (named ``username`` if given) holding ``role`` on ``project`` (and its
    tenant), or on ``tenant``."""
    user = UserFactory(username=username) if username else UserFactory()
    Membership.objects.create(
        user=user,
        tenant=tenant or (project.tenant if project else None),
        project=project,
        role=role,
        limit=limit,
    )
    return user


def service_account_client(project, name: str, role: str = "project_admin") -> tuple[APIClient, str]:
    """An API client holding a fresh token of a new service account of ``project`` (an
    app controller, with the default role), and the actor name audit events carry."""
    operator = principals.for_user(member("tenant_admin", tenant=project.tenant))
    issued = tenancy.create_service_account(operator, project, name=name, role=role)
    token, _ = tenancy.issue_token(issued.account.client_id, issued.client_secret)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client, f"sa:{name}"
