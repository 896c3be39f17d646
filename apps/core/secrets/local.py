"""The ``local`` backend: secrets in the platform's database, encrypted with
``GPUAAS_ENCRYPTION_KEYS`` (the newest key encrypts, every listed key decrypts)."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from apps.core import crypto
from apps.core.models import IdempotencyRecord, StoredSecret
from apps.core.secrets.base import MAX_VALUE, SecretNotFound, check_path


class LocalStore:
    name = "local"

    def read(self, path: str) -> str:
        row = StoredSecret.objects.filter(path=check_path(path)).first()
        if row is None:
            raise SecretNotFound(path)
        return crypto.decrypt(row.ciphertext)

    def write(self, path: str, value: str) -> None:
        if len(value) > MAX_VALUE:
            raise ValueError("a secret holds at most 64 KiB")
        check_path(path)
        row = StoredSecret.objects.filter(path=path).first()
        if row is not None and crypto.decrypt(row.ciphertext) == value:
            return
        StoredSecret.objects.update_or_create(path=path, defaults={"ciphertext": crypto.encrypt(value)})

    def delete(self, path: str) -> None:
        StoredSecret.objects.filter(path=check_path(path)).delete()

    def paths(self) -> list[str]:
        return list(StoredSecret.objects.values_list("path", flat=True))


@dataclass
class Rotation:
    reencrypted: int = 0
    current: int = 0


_BATCH = 200


def rotate_keys() -> Rotation:
    """Everything the platform keeps encrypted with ``GPUAAS_ENCRYPTION_KEYS`` (the
    local store, and idempotency replays that may hold a one-time secret) encrypted
    again under the newest key. Batches of rows, each batch committed: the old keys
    keep decrypting what is not done yet, and a second run finds nothing to do."""
    done = Rotation()
    for model, field in ((StoredSecret, "ciphertext"), (IdempotencyRecord, "response_body")):
        last = 0
        while True:
            with transaction.atomic():
                batch = model.objects.select_for_update().filter(pk__gt=last).order_by("pk")
                rows = list(batch.only("pk", field)[:_BATCH])
                if not rows:
                    break
                last = rows[-1].pk
                changed = []
                for row in rows:
                    token = getattr(row, field)
                    if not isinstance(token, str):  # a replay with nothing sealed in it
                        continue
                    if crypto.under_newest_key(token):
                        done.current += 1
                        continue
                    setattr(row, field, crypto.reencrypt(token))
                    changed.append(row)
                model.objects.bulk_update(changed, [field])
                done.reencrypted += len(changed)
    return done
