"""The secrets store, the same behaviour from both backends (``local`` in the
database, ``vault`` against a real OpenBao): what is written is read back, replaced
and deleted; the platform's own secrets live there and nowhere else."""

from __future__ import annotations

import uuid

import hvac
import pytest

from apps.access.models import ProjectSecret
from apps.core import secrets
from apps.core.models import StoredSecret
from apps.tenancy import services as tenancy
from apps.tenancy.auth import platform_tokens
from apps.tenancy.models import SigningKey

pytestmark = pytest.mark.django_db


def test_a_written_secret_is_read_back_replaced_and_deleted(secrets_backend):
    store = secrets.store()
    assert store.name == secrets_backend
    store.write("tests/one", "first value")
    assert store.read("tests/one") == "first value"
    store.write("tests/one", "second value\nwith a newline and ünïcode")
    assert store.read("tests/one") == "second value\nwith a newline and ünïcode"
    store.write("tests/nested/two", "x")
    assert set(store.paths()) >= {"tests/one", "tests/nested/two"}
    store.delete("tests/one")
    store.delete("tests/one")  # again: nothing to do, no error
    with pytest.raises(secrets.SecretNotFound):
        store.read("tests/one")
    assert "tests/one" not in store.paths()


def test_paths_are_the_platforms_own_and_values_are_bounded(secrets_backend):
    store = secrets.store()
    for bad in ("../escape", "/absolute", "Upper/Case", "a//b", ""):
        with pytest.raises(ValueError, match="not a secrets-store path"):
            store.write(bad, "v")
    with pytest.raises(ValueError, match="64 KiB"):
        store.write("tests/big", "x" * (64 * 1024 + 1))


def test_signing_keys_live_in_the_store(secrets_backend, api):
    platform_tokens.forget_cached_keys()
    jwks = api.get("/.well-known/jwks.json").json()
    key = SigningKey.objects.get(kid=jwks["keys"][0]["kid"])
    assert key.secret_path == f"tenancy/signing-keys/{key.kid}"
    assert secrets.store().read(key.secret_path).startswith("-----BEGIN PRIVATE KEY-----")
    assert not hasattr(key, "private_key")
    # Only the local backend keeps anything in the database, and only as ciphertext.
    assert StoredSecret.objects.exists() == (secrets_backend == "local")


def test_vault_writes_are_check_and_set(settings, openbao):
    settings.SECRETS_BACKEND, settings.VAULT_ADDR, settings.VAULT_TOKEN = "vault", openbao.addr, openbao.token
    settings.VAULT_PREFIX = prefix = f"cas-{uuid.uuid4().hex}/"
    store = secrets.store()
    store.write("k", "a")
    store.write("k", "a")  # the value already there: no new version
    other = hvac.Client(url=openbao.addr, token=openbao.token).secrets.kv.v2
    answer = other.read_secret_version(f"{prefix}k", mount_point="secret", raise_on_deleted_version=True)
    assert answer["data"]["metadata"]["version"] == 1
    # Another writer's check-and-set against a stale version is refused by the server,
    # which is what makes our read-then-write safe.
    store.write("k", "b")
    with pytest.raises(hvac.exceptions.InvalidRequest, match="check-and-set"):
        other.create_or_update_secret(f"{prefix}k", {"value": "stale"}, cas=1, mount_point="secret")
    assert store.read("k") == "b"


def test_an_unreachable_vault_answers_503_not_500(settings, api, project_admin, project):
    from tests.support.processes import free_port

    settings.SECRETS_BACKEND = "vault"
    settings.VAULT_ADDR, settings.VAULT_TOKEN = f"http://127.0.0.1:{free_port()}", "nobody"
    settings.VAULT_TIMEOUT_SECONDS = 2
    api.force_login(project_admin)
    response = api.post(f"/api/v1/projects/{project.pk}/secrets", {"name": "hf", "value": "v"}, format="json")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "unavailable"
    assert not ProjectSecret.objects.exists()  # nothing half-done


def test_a_wrong_vault_token_answers_503(settings, openbao, api, project_admin, project):
    settings.SECRETS_BACKEND, settings.VAULT_ADDR, settings.VAULT_TOKEN = "vault", openbao.addr, "wrong"
    api.force_login(project_admin)
    response = api.post(f"/api/v1/projects/{project.pk}/access-credentials", {"name": "c"}, format="json")
    assert response.status_code == 503


def test_a_record_whose_secret_is_missing_answers_a_conflict_not_500(
    settings, api, project, project_admin, platform_admin, openbao
):
    """As after switching GPUAAS_SECRETS_BACKEND without running migrate_secrets."""
    from apps.access.models import AccessCredential
    from apps.access.services import create_credential
    from apps.tenancy import principal as principals

    create_credential(principals.for_user(project_admin), project, name="k")
    settings.SECRETS_BACKEND, settings.VAULT_ADDR, settings.VAULT_TOKEN = "vault", openbao.addr, openbao.token
    settings.VAULT_PREFIX = f"empty-{uuid.uuid4().hex}/"
    issued = tenancy.create_service_account(
        principals.for_user(platform_admin), project, name="ctl", role="project_admin"
    )
    # A fresh signing key is made in the new store: tokens keep working.
    token, _ = tenancy.issue_token(issued.account.client_id, issued.client_secret)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    cid = AccessCredential.objects.get().pk
    answer = api.post(f"/api/v1/projects/{project.pk}/access-credentials/{cid}/deliver", {}, format="json")
    assert answer.status_code == 409
    assert "migrate_secrets" in answer.json()["error"]["message"]
