"""The data migrations of issue 17 move the ciphertext that app tokens and signing keys
had in their own columns into the secrets store (either backend), without loss."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from apps.core import crypto, secrets
from apps.runtime.models import RuntimeSecret
from apps.tenancy.models import SigningKey
from tests.factories import AppInstanceFactory
from tests.support.snapshots import made_once

# Migrating back and forth inside the test's transaction needs PostgreSQL's transactional DDL.
pytestmark = [pytest.mark.django_db, pytest.mark.production]

BEFORE = [("runtime", "0003_member_allocation_rank"), ("tenancy", "0004_quota")]


def _migrate(targets):
    if connection.vendor == "postgresql":
        # The transaction holds deferred foreign-key checks of the rows made so far;
        # PostgreSQL alters no table with checks pending, so run them now.
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    MigrationExecutor(connection).migrate(targets)


def _instance_on_the_old_schema():
    instance = AppInstanceFactory()
    _migrate(BEFORE)
    return instance.pk, MigrationExecutor(connection).loader.project_state(BEFORE).apps


@pytest.fixture(scope="module")
def old_schema(django_db_setup, django_db_blocker):
    """An instance, and the schema migrated back to before the data migrations: once
    for the module, each test migrating forward in its own savepoint. Migrating back
    renders the project's state at every migration after the first one it undoes, 3.9
    CPU-s, twice the way forward (2026-11-29)."""
    with made_once(django_db_blocker, _instance_on_the_old_schema) as made:
        yield made


def test_ciphertext_moves_into_the_store(secrets_backend, old_schema):
    instance_pk, old = old_schema
    old.get_model("runtime", "RuntimeSecret").objects.create(
        instance_id=instance_pk, name="token", value_encrypted=crypto.encrypt("the-old-app-token")
    )
    old.get_model("tenancy", "SigningKey").objects.create(
        kid="0123abcd", private_key=crypto.encrypt("-----BEGIN PRIVATE KEY-----\nold\n"), public_jwk={}
    )

    _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    secret = RuntimeSecret.objects.get(instance_id=instance_pk)
    assert secret.secret_path == f"runtime/instances/{instance_pk}/token"
    assert secrets.store().read(secret.secret_path) == "the-old-app-token"
    key = SigningKey.objects.get(kid="0123abcd")
    assert secrets.store().read(key.secret_path) == "-----BEGIN PRIVATE KEY-----\nold\n"
    with connection.cursor() as cursor:
        columns = {
            c.name for c in connection.introspection.get_table_description(cursor, "runtime_runtimesecret")
        }
    assert "value_encrypted" not in columns
