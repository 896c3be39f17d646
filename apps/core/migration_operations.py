"""Migration operations the apps share."""

from __future__ import annotations

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db.migrations.operations import AddIndex


class AddIndexWithoutLocking(AddIndexConcurrently):
    """An index on a big table, built without locking out its writers: ``CREATE INDEX
    CONCURRENTLY`` on PostgreSQL (the expand step of the migration policy, docs/operations.md),
    a plain ``CREATE INDEX`` on SQLite, the embedded default, which has no such thing, and
    inside a transaction someone else opened (a test migrating back and forth), where
    PostgreSQL cannot build one concurrently. Its migration sets ``atomic = False``."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if _concurrently(schema_editor):
            super().database_forwards(app_label, schema_editor, from_state, to_state)
        else:
            AddIndex.database_forwards(self, app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if _concurrently(schema_editor):
            super().database_backwards(app_label, schema_editor, from_state, to_state)
        else:
            AddIndex.database_backwards(self, app_label, schema_editor, from_state, to_state)


def _concurrently(schema_editor) -> bool:
    connection = schema_editor.connection
    return connection.vendor == "postgresql" and not connection.in_atomic_block
