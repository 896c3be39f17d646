# The platform's token signing keys move into the secrets store (issue 17): each row
# keeps the path of its private key; the ciphertext column goes in the next migration.

from django.db import migrations, models

from apps.core import crypto, secrets


def into_the_store(apps, schema_editor):
    SigningKey = apps.get_model("tenancy", "SigningKey")
    store = secrets.store()
    for key in SigningKey.objects.filter(secret_path=""):
        path = f"tenancy/signing-keys/{key.kid}"
        store.write(path, crypto.decrypt(key.private_key))
        key.secret_path = path
        key.save(update_fields=["secret_path"])


def out_of_the_store(apps, schema_editor):
    SigningKey = apps.get_model("tenancy", "SigningKey")
    store = secrets.store()
    for key in SigningKey.objects.exclude(secret_path=""):
        key.private_key = crypto.encrypt(store.read(key.secret_path))
        key.save(update_fields=["private_key"])


class Migration(migrations.Migration):

    dependencies = [
        ("core", "0004_stored_secrets"),
        ("tenancy", "0004_quota"),
    ]

    operations = [
        migrations.AddField(
            model_name="signingkey",
            name="secret_path",
            field=models.CharField(default="", editable=False, max_length=255),
            preserve_default=False,
        ),
        migrations.AlterField(
            model_name="signingkey",
            name="private_key",
            field=models.TextField(default=""),
        ),
        migrations.RunPython(into_the_store, out_of_the_store),
    ]
