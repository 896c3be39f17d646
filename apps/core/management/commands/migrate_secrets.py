"""``manage.py migrate_secrets --to vault|local``: move every secret into one backend.

Set ``GPUAAS_SECRETS_BACKEND`` to the target first (the platform reads only the
configured backend), then run this before starting the portal and workers, as
``migrate``. Safe to run again: a second run moves nothing."""

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from apps.core import audit, secrets


class Command(BaseCommand):
    help = "Move every secret into the given secrets-store backend (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("--to", required=True, choices=secrets.BACKENDS, dest="target")

    def handle(self, *args, target, **options):
        if target != settings.SECRETS_BACKEND:
            raise CommandError(
                f"GPUAAS_SECRETS_BACKEND is {settings.SECRETS_BACKEND}: set it to {target} first, "
                "or the platform would not find the secrets moved there"
            )
        source = next(name for name in secrets.BACKENDS if name != target)
        if not (settings.VAULT_ADDR and settings.VAULT_TOKEN):
            raise CommandError(
                "GPUAAS_VAULT_ADDR and GPUAAS_VAULT_TOKEN: set them to move secrets "
                f"from {source} to {target}"
            )
        try:
            done = secrets.move(secrets.backend(source), secrets.backend(target))
        except secrets.SecretStoreUnavailable as exc:
            raise CommandError(f"{exc.message} (GPUAAS_VAULT_ADDR: {settings.VAULT_ADDR})") from exc
        audit.record(None, "secrets.migrate", details={"from": source, "to": target, "moved": done.moved})
        self.stdout.write(
            f"moved {done.moved} secret(s) from {source} to {target}"
            + (f"; {done.kept} were already in {target}" if done.kept else "")
        )
