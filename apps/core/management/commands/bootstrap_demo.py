"""Demo data for the embedded default; safe to run twice.

Each app that has demo data keeps it in ``apps/<app>/demo.py`` with a
``bootstrap(stdout)`` function; they run in INSTALLED_APPS order.
"""

from importlib import import_module

from django.apps import apps as django_apps
from django.core.management.base import BaseCommand
from django.db import transaction


class Command(BaseCommand):
    help = "Create the demo tenant, users and inventory (idempotent)."

    def handle(self, *args, **options):
        # By app config, not INSTALLED_APPS' strings: an entry may name a config class
        # (the admin's is apps.portal.admin_apps.OperationsAdminConfig).
        for config in django_apps.get_app_configs():
            app = config.name
            if not app.startswith("apps."):
                continue
            try:
                module = import_module(f"{app}.demo")
            except ModuleNotFoundError as exc:
                if exc.name != f"{app}.demo":
                    raise
                continue
            with transaction.atomic():
                module.bootstrap(self.stdout)
        self.stdout.write(
            self.style.SUCCESS("demo ready: sign in as demo/demo (tenant admin) or admin/admin")
        )
