"""``manage.py rotate_encryption_key``: encrypt the local store again under the newest key.

Put a new key first in ``GPUAAS_ENCRYPTION_KEYS`` (keep the old ones after it),
restart, run this; once it reports nothing left under an old key, the old keys can
be dropped from the list. Safe to run again and while the platform runs."""

from django.core.management.base import BaseCommand

from apps.core import audit
from apps.core.secrets.local import rotate_keys


class Command(BaseCommand):
    help = "Re-encrypt everything encrypted at rest under the newest GPUAAS_ENCRYPTION_KEYS key."

    def handle(self, *args, **options):
        done = rotate_keys()
        audit.record(None, "secrets.rotate_key", details={"reencrypted": done.reencrypted})
        self.stdout.write(
            f"re-encrypted {done.reencrypted} value(s) under the newest key; "
            f"{done.current} already were. Older keys may now be removed from GPUAAS_ENCRYPTION_KEYS."
        )
