"""People with a role: a user and the one membership that gives it to them."""

from __future__ import annotations

from apps.tenancy.models import Membership
from tests.factories import UserFactory


def member(role: str, *, tenant=None, project=None, limit: str = ""):
    """A new user holding ``role`` on ``project`` (and its tenant), or on ``tenant``."""
    user = UserFactory()
    Membership.objects.create(
        user=user,
        tenant=tenant or (project.tenant if project else None),
        project=project,
        role=role,
        limit=limit,
    )
    return user
