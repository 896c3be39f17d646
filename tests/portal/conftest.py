from __future__ import annotations

import pytest

from tests.support.members import member
from tests.support.pages import client_for


@pytest.fixture
def as_user():
    """``as_user(user)``: a test client signed in as ``user``."""
    return client_for


@pytest.fixture
def billing_admin(tenant):
    return member("billing_admin", tenant=tenant)


@pytest.fixture
def outsider(other_tenant_project):
    """A tenant admin of another tenant (Globex)."""
    return member("tenant_admin", tenant=other_tenant_project.tenant)
