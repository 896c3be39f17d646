"""The portal's pages run scripts from its static files only: not from the apps that
path-prefix routes serve under /w/ on the same origin."""

from __future__ import annotations

import pytest

from tests.support.members import member

pytestmark = pytest.mark.django_db


def directives(response) -> dict[str, list[str]]:
    policy = response["Content-Security-Policy"]
    return {part.split()[0]: part.split()[1:] for part in policy.split(";") if part.strip()}


@pytest.mark.parametrize("signed_in", [True, False])
def test_pages_trust_only_the_static_files_for_scripts(client, tenant, signed_in):
    if signed_in:
        client.force_login(member("tenant_admin", tenant=tenant))
    response = client.get("/" if signed_in else "/accounts/login/")
    assert response.status_code == 200
    assert directives(response)["script-src"] == ["http://testserver/static/"]
    assert "'self'" not in directives(response)["script-src"]
