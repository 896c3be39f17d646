"""An operator deactivates an account (the admin's "active" box): its sessions end at
their next request, whether it signed in with a password or through the identity
provider, and from then on nothing it sends acts."""

from __future__ import annotations

import pytest
from django.test import Client

from apps.tenancy.models import Project

pytestmark = pytest.mark.django_db

PASSWORD_BACKEND = "django.contrib.auth.backends.ModelBackend"
OIDC_BACKEND = "apps.tenancy.auth.oidc.PlatformOIDCBackend"


@pytest.fixture(params=[PASSWORD_BACKEND, OIDC_BACKEND], ids=["password", "oidc"])
def signed_in(request, settings, tenant, tenant_admin):
    """A browser of ``tenant_admin`` signed in the way the parameter names."""
    if request.param not in settings.AUTHENTICATION_BACKENDS:
        settings.AUTHENTICATION_BACKENDS = [*settings.AUTHENTICATION_BACKENDS, request.param]
    browser = Client()
    browser.force_login(tenant_admin, backend=request.param)
    assert browser.get("/").status_code == 200
    return browser


def test_a_deactivated_account_is_signed_out_at_its_next_request(signed_in, tenant_admin):
    tenant_admin.is_active = False
    tenant_admin.save()

    response = signed_in.get("/")

    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_a_deactivated_account_can_no_longer_act(signed_in, tenant, tenant_admin):
    tenant_admin.is_active = False
    tenant_admin.save()

    signed_in.post("/projects/new/", {"tenant": str(tenant.pk), "project_id": "late", "name": "Late"})

    assert not Project.objects.filter(project_id="late").exists()
