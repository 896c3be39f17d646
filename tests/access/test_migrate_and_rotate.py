"""``migrate_secrets`` moves every kind of secret between the backends (a real
OpenBao), idempotently, and the platform keeps working from the target;
``rotate_encryption_key`` re-encrypts the local store under the newest key while
the older one still decrypts."""

from __future__ import annotations

from io import StringIO

import pytest
from cryptography.fernet import Fernet
from django.core.management import CommandError, call_command

from apps.access import services as access
from apps.access.models import AccessCredential, ProjectSecret
from apps.core import crypto, secrets
from apps.core.models import AuditEvent, IdempotencyRecord, StoredSecret
from apps.tenancy import principal as principals
from apps.tenancy.auth import platform_tokens
from apps.tenancy.models import SigningKey

pytestmark = pytest.mark.django_db


@pytest.fixture
def vault_settings(settings, openbao):
    import uuid

    settings.VAULT_ADDR, settings.VAULT_TOKEN = openbao.addr, openbao.token
    settings.VAULT_PREFIX = f"migrate-{uuid.uuid4().hex}/"
    return settings


@pytest.fixture
def every_kind(project, project_admin, api):
    """One secret of each kind the platform keeps: a signing key, an access
    credential, a project secret (app tokens are covered by the scan test)."""
    admin = principals.for_user(project_admin)
    api.get("/.well-known/jwks.json")  # the first signing key
    issued = access.create_credential(admin, project, name="controller")
    access.put_secret(admin, project, name="hf-token", value="hf_migrate_me_0123456789")
    return {"private_key": issued.private_key, "secret": "hf_migrate_me_0123456789"}


def _migrate(target: str) -> str:
    out = StringIO()
    call_command("migrate_secrets", "--to", target, stdout=out)
    return out.getvalue()


def _values_read_back(every_kind) -> None:
    credential = AccessCredential.objects.get()
    assert secrets.store().read(credential.secret_path) == every_kind["private_key"]
    secret = ProjectSecret.objects.get()
    assert secrets.store().read(secret.secret_path) == every_kind["secret"]
    platform_tokens.forget_cached_keys()
    key = SigningKey.objects.get()
    assert "PRIVATE KEY" in secrets.store().read(key.secret_path)


def test_secrets_move_to_vault_and_back_idempotently(vault_settings, every_kind):
    assert StoredSecret.objects.count() == 3

    vault_settings.SECRETS_BACKEND = "vault"
    assert _migrate("vault") == "moved 3 secret(s) from local to vault\n"
    assert not StoredSecret.objects.exists()
    _values_read_back(every_kind)
    assert _migrate("vault") == "moved 0 secret(s) from local to vault\n"

    vault_settings.SECRETS_BACKEND = "local"
    assert _migrate("local") == "moved 3 secret(s) from vault to local\n"
    assert StoredSecret.objects.count() == 3
    assert secrets.backend("vault").paths() == []
    _values_read_back(every_kind)
    assert _migrate("local") == "moved 0 secret(s) from vault to local\n"
    assert AuditEvent.objects.filter(action="secrets.migrate").count() == 4


def test_a_move_cut_short_is_finished_by_the_next_run(vault_settings, every_kind):
    vault_settings.SECRETS_BACKEND = "vault"
    # As if a run had copied one secret and died before deleting its local copy.
    first = StoredSecret.objects.order_by("path").first()
    secrets.backend("vault").write(first.path, crypto.decrypt(first.ciphertext))
    assert _migrate("vault") == "moved 2 secret(s) from local to vault; 1 were already in vault\n"
    assert not StoredSecret.objects.exists()
    _values_read_back(every_kind)


def test_moving_to_a_backend_the_platform_does_not_use_is_refused(vault_settings, every_kind):
    with pytest.raises(CommandError, match="GPUAAS_SECRETS_BACKEND is local: set it to vault first"):
        _migrate("vault")
    assert StoredSecret.objects.count() == 3


def test_rotation_reencrypts_under_the_newest_key(settings, every_kind):
    old = settings.ENCRYPTION_KEYS[0]
    IdempotencyRecord.objects.create(
        principal="user:1", key="k", request_hash="h", response_status=201, response_body=crypto.encrypt("{}")
    )
    new = Fernet.generate_key().decode()
    settings.ENCRYPTION_KEYS = [new, old]
    # The old key still decrypts everything before (and while) the rotation runs.
    _values_read_back(every_kind)
    assert not any(crypto.under_newest_key(row.ciphertext) for row in StoredSecret.objects.all())

    out = StringIO()
    call_command("rotate_encryption_key", stdout=out)
    assert out.getvalue().startswith("re-encrypted 4 value(s) under the newest key; 0 already were.")

    settings.ENCRYPTION_KEYS = [new]  # the old key dropped: everything still reads
    _values_read_back(every_kind)
    assert crypto.decrypt(IdempotencyRecord.objects.get().response_body) == "{}"

    settings.ENCRYPTION_KEYS = [new, old]
    out = StringIO()
    call_command("rotate_encryption_key", stdout=out)
    assert out.getvalue().startswith("re-encrypted 0 value(s) under the newest key; 4 already were.")


def test_moving_without_vault_settings_says_which_are_missing(settings, every_kind):
    settings.VAULT_ADDR = settings.VAULT_TOKEN = ""
    with pytest.raises(CommandError, match="GPUAAS_VAULT_ADDR and GPUAAS_VAULT_TOKEN: set them"):
        _migrate("local")
    assert StoredSecret.objects.count() == 3


def test_an_unreachable_vault_stops_the_move_with_nothing_lost(settings, every_kind):
    from tests.support.processes import free_port

    settings.SECRETS_BACKEND = "vault"
    settings.VAULT_ADDR, settings.VAULT_TOKEN = f"http://127.0.0.1:{free_port()}", "t"
    settings.VAULT_TIMEOUT_SECONDS = 2
    with pytest.raises(CommandError, match="cannot be reached"):
        _migrate("vault")
    assert StoredSecret.objects.count() == 3
