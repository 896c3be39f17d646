from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("tenancy", "0005_signing_keys_in_the_store"),
    ]

    operations = [
        migrations.RemoveField(model_name="signingkey", name="private_key"),
    ]
