"""Demo data for the embedded default; safe to run twice.

Each app that has demo data keeps it in ``apps/<app>/demo.py`` with a
``bootstrap(stdout)`` function; they run in INSTALLED_APPS order.
"""

from django.core.management.base import BaseCommand
from django.db import transaction

from apps.core import app_modules


class Command(BaseCommand):
    help = "Create the demo tenant, users and inventory (idempotent)."

    def handle(self, *args, **options):
        for module in app_modules.each("demo"):
            with transaction.atomic():
                module.bootstrap(self.stdout)
        self.stdout.write(
            self.style.SUCCESS("demo ready: sign in as demo/demo (tenant admin) or admin/admin")
        )
