from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("core", "0003_simulatedfault_simulatedresource"),
    ]

    operations = [
        migrations.CreateModel(
            name="StoredSecret",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("path", models.CharField(max_length=255, unique=True)),
                ("ciphertext", models.TextField()),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
            options={"ordering": ["path"]},
        ),
    ]
