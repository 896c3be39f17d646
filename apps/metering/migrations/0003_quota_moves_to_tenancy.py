# Quotas moved to tenancy (decision 0038): the model leaves metering's state here and
# tenancy 0004 takes its table over, rows and all.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('metering', '0002_rate'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name='Quota')],
        ),
    ]
