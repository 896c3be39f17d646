"""``manage.py restore BACKUP [--force]`` (``make restore BACKUP=...``): a backup into
the database of ``DATABASE_URL`` and the configured secrets store, with the
``GPUAAS_ENCRYPTION_KEYS`` of the platform that made it. Refuses a database that
holds tables unless ``--force``. Stop the portal and its workers first."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from apps.core import backups, secrets


class Command(BaseCommand):
    help = "Restore a backup made by `manage.py backup` into an empty database."

    def add_arguments(self, parser):
        parser.add_argument("backup", type=Path, help="the backup's directory")
        parser.add_argument(
            "--force", action="store_true", help="replace the contents of a database that is not empty"
        )

    def handle(self, *args, backup, force, **options):
        try:
            done = backups.restore(backup, force=force)
        except (backups.BackupError, secrets.SecretStoreUnavailable) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"restored {backup} into the {done.database} database"
            + (f"; {done.secrets} secret(s) written to the secrets store" if done.secrets else "")
        )
        if done.unapplied_migrations:
            self.stdout.write(
                f"the code has {done.unapplied_migrations} migration(s) the backup predates: "
                "run `manage.py migrate` before starting the portal"
            )
