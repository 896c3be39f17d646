# App tokens move into the secrets store (issue 17): each row keeps the path of its
# value; the ciphertext column goes in the next migration, once every value is moved.

from django.db import migrations, models

from apps.core import crypto, secrets


def into_the_store(apps, schema_editor):
    RuntimeSecret = apps.get_model("runtime", "RuntimeSecret")
    store = secrets.store()
    for row in RuntimeSecret.objects.filter(secret_path=""):
        path = f"runtime/instances/{row.instance_id}/{row.name}"
        store.write(path, crypto.decrypt(row.value_encrypted))
        row.secret_path = path
        row.save(update_fields=["secret_path"])


def out_of_the_store(apps, schema_editor):
    RuntimeSecret = apps.get_model("runtime", "RuntimeSecret")
    store = secrets.store()
    for row in RuntimeSecret.objects.exclude(secret_path=""):
        row.value_encrypted = crypto.encrypt(store.read(row.secret_path))
        row.save(update_fields=["value_encrypted"])


class Migration(migrations.Migration):

    dependencies = [
        ("core", "0004_stored_secrets"),
        ("runtime", "0003_member_allocation_rank"),
    ]

    operations = [
        migrations.AddField(
            model_name="runtimesecret",
            name="secret_path",
            field=models.CharField(default="", max_length=255),
            preserve_default=False,
        ),
        migrations.AlterField(
            model_name="runtimesecret",
            name="value_encrypted",
            field=models.TextField(default=""),
        ),
        migrations.RunPython(into_the_store, out_of_the_store),
    ]
