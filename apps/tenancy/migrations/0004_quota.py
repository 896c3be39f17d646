# Quotas moved here from metering (decision 0038): the same table, renamed, with its
# rows; only the model's state is created.

import django.db.models.deletion
import uuid
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tenancy', '0003_project_policy'),
        ('metering', '0003_quota_moves_to_tenancy'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    'ALTER TABLE metering_quota RENAME TO tenancy_quota',
                    reverse_sql='ALTER TABLE tenancy_quota RENAME TO metering_quota',
                ),
            ],
            state_operations=[
                migrations.CreateModel(
                    name='Quota',
                    fields=[
                        ('id', models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                        ('resource', models.CharField(max_length=64)),
                        ('limit', models.BigIntegerField()),
                        ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='quotas', to='tenancy.tenant')),
                    ],
                    options={
                        'ordering': ['resource'],
                        'constraints': [models.UniqueConstraint(fields=('tenant', 'resource'), name='quota_unique_resource'), models.CheckConstraint(condition=models.Q(('limit__gte', 0)), name='quota_limit_not_negative')],
                    },
                ),
            ],
        ),
    ]
