from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("runtime", "0004_runtime_secrets_in_the_store"),
    ]

    operations = [
        migrations.RemoveField(model_name="runtimesecret", name="value_encrypted"),
    ]
