"""The data migrations of issue 17 move the ciphertext that app tokens and signing keys
had in their own columns into the secrets store (either backend), without loss."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from apps.core import crypto, secrets
from apps.runtime.models import RuntimeSecret
from apps.tenancy.models import SigningKey
from tests.support.proxy import start_instance

# Migrating back and forth inside the test's transaction needs PostgreSQL's transactional DDL.
pytestmark = [pytest.mark.django_db, pytest.mark.production]

BEFORE = [("runtime", "0003_member_allocation_rank"), ("tenancy", "0004_quota")]


def _migrate(targets):
    if connection.vendor == "postgresql":
        # The test's transaction holds deferred foreign-key checks of the rows made so
        # far; PostgreSQL alters no table with checks pending, so run them now.
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def test_ciphertext_moves_into_the_store(secrets_backend, allocator, project, jupyterlab, active_allocation):
    instance = start_instance(allocator, project, active_allocation, jupyterlab, host="127.0.0.1", port=41998)
    RuntimeSecret.objects.all().delete()
    old = _migrate(BEFORE)
    old.get_model("runtime", "RuntimeSecret").objects.create(
        instance_id=instance.pk, name="token", value_encrypted=crypto.encrypt("the-old-app-token")
    )
    old.get_model("tenancy", "SigningKey").objects.create(
        kid="0123abcd", private_key=crypto.encrypt("-----BEGIN PRIVATE KEY-----\nold\n"), public_jwk={}
    )

    _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    secret = RuntimeSecret.objects.get(instance=instance)
    assert secret.secret_path == f"runtime/instances/{instance.pk}/token"
    assert secrets.store().read(secret.secret_path) == "the-old-app-token"
    key = SigningKey.objects.get(kid="0123abcd")
    assert secrets.store().read(key.secret_path) == "-----BEGIN PRIVATE KEY-----\nold\n"
    with connection.cursor() as cursor:
        columns = {
            c.name for c in connection.introspection.get_table_description(cursor, "runtime_runtimesecret")
        }
    assert "value_encrypted" not in columns
