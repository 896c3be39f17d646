from django.db import migrations


def create_shared_pool(apps, schema_editor):
    ProxyPool = apps.get_model("proxy", "ProxyPool")
    ProxyPool.objects.get_or_create(name="shared", defaults={"scope": "shared", "status": "active"})


class Migration(migrations.Migration):
    dependencies = [("proxy", "0001_initial")]

    operations = [migrations.RunPython(create_shared_pool, migrations.RunPython.noop)]
