"""On PostgreSQL the database itself refuses UPDATE and DELETE of audit rows."""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION core_auditevent_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'audit events are append-only';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER core_auditevent_append_only
    BEFORE UPDATE OR DELETE ON core_auditevent
    FOR EACH ROW EXECUTE FUNCTION core_auditevent_append_only();
"""
DROP = """
DROP TRIGGER IF EXISTS core_auditevent_append_only ON core_auditevent;
DROP FUNCTION IF EXISTS core_auditevent_append_only();
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("core", "0001_initial")]
    operations = [migrations.RunPython(forwards, backwards)]
