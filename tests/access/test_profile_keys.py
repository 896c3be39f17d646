"""Users keep SSH public keys in their profile; each new allocation of a project they
may manage allocations in gets them, owned by them."""

from __future__ import annotations

import pytest

from apps.access.models import AuthorizedKey
from apps.allocations import services as allocations
from apps.tenancy import principal as principals
from tests.support.members import member
from tests.support.ssh import key_pair

pytestmark = pytest.mark.django_db

PROFILE = "/api/v1/profile/ssh-keys"


def test_profile_keys_go_on_every_new_allocation_of_the_users_projects(
    api, allocator, project, viewer, nodes, tmp_path, django_capture_on_commit_callbacks
):
    colleague = member("project_admin", project=project)
    for user, name in ((allocator, "alice"), (colleague, "bob"), (viewer, "victor")):
        api.force_login(user)
        added = api.post(PROFILE, {"public_key": key_pair(tmp_path, name).public_key}, format="json")
        assert added.status_code == 201, added.content
        api.logout()
    api.force_login(allocator)
    assert [key["name"] for key in api.get(PROFILE).json()["results"]] == ["alice@laptop"]

    with django_capture_on_commit_callbacks(execute=True):
        [allocation] = allocations.allocate(
            principals.for_user(allocator), project, flavor_name="h100-8x", os_image="ubuntu-22.04"
        )

    keys = api.get(f"/api/v1/projects/{project.pk}/allocations/{allocation.pk}/authorized-keys").json()
    # A viewer may not log in to the project's nodes: their profile key stays off.
    assert sorted((k["owner"], k["purpose"]) for k in keys["results"]) == sorted(
        [(allocator.username, "user"), (colleague.username, "user")]
    )


def test_a_profile_key_is_checked_kept_once_and_removed_by_its_owner_only(api, allocator, viewer, tmp_path):
    api.force_login(allocator)
    key = key_pair(tmp_path, "alice").public_key
    bad = api.post(PROFILE, {"public_key": "ssh-rsa nope"}, format="json")
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "validation_error"
    created = api.post(PROFILE, {"public_key": key, "name": "laptop"}, format="json").json()
    assert api.post(PROFILE, {"public_key": key}, format="json").status_code == 409
    api.logout()

    api.force_login(viewer)
    assert api.delete(f"{PROFILE}/{created['id']}").status_code == 404
    api.logout()
    api.force_login(allocator)
    assert api.delete(f"{PROFILE}/{created['id']}").status_code == 204
    assert api.get(PROFILE).json()["results"] == []
    assert not AuthorizedKey.objects.exists()
