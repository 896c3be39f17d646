"""``manage.py backup [--output DIR]`` (``make backup``): the database and the secrets
store into a new timestamped directory under ``var/backups/`` (apps/core/backups.py).
Runs while the platform runs; prints the directory."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from apps.core import backups, secrets


class Command(BaseCommand):
    help = "Back up the database and the secrets store into a new timestamped directory."

    def add_arguments(self, parser):
        parser.add_argument("--output", type=Path, help="the folder of backups (default: var/backups)")

    def handle(self, *args, output, **options):
        try:
            made = backups.create(output)
        except (backups.BackupError, secrets.SecretStoreUnavailable) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(str(made))
