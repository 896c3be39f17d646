"""``Idempotency-Key`` for creating POSTs (CONTRACT.md).

The same key from the same principal with the same body gets the first response
again; a different body answers 409 ``idempotency_conflict``. The record is
inserted in the same transaction as the work: a concurrent duplicate's INSERT
blocks on the unique index until the first request commits, then finds its
stored response, so the work is done once without a check-then-insert race.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from datetime import timedelta
from functools import wraps

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import IntegrityError, transaction
from django.utils import timezone
from rest_framework.exceptions import APIException
from rest_framework.response import Response

from apps.core import crypto
from apps.core.errors import ApiError, Conflict, ValidationFailed
from apps.core.models import IdempotencyRecord

HEADER = "Idempotency-Key"
RETENTION = timedelta(hours=48)
_PRINTABLE = re.compile(r"[\x20-\x7e]{1,255}")  # fullmatch: "$" would let a trailing newline in
# Transient answers are not remembered: retrying them must do the work.
_NOT_STORED = {429, 503}


def _request_hash(request) -> str:
    # Keyed: a body can carry a secret (a project secret's value), and a plain hash of
    # a guessable one could be tested against the stored row.
    digest = hmac.new(settings.SECRET_KEY.encode(), digestmod=hashlib.sha256)
    digest.update(request.method.encode())
    digest.update(b"\0")
    digest.update(request.get_full_path().encode())
    digest.update(b"\0")
    digest.update(request.body)
    return digest.hexdigest()


def _seal(data) -> str:
    # A stored body can hold a one-time secret (a new service account's
    # client_secret): it is kept encrypted, like every secret at rest.
    return crypto.encrypt(json.dumps(data, cls=DjangoJSONEncoder))


def _unseal(stored):
    return json.loads(crypto.decrypt(stored)) if isinstance(stored, str) else stored


def _replay(record: IdempotencyRecord) -> Response:
    response = Response(
        _unseal(record.response_body), status=record.response_status, headers=record.response_headers
    )
    response["Idempotent-Replayed"] = "true"
    return response


def idempotent(handler):
    """Decorate a DRF handler (``post``) so it honours ``Idempotency-Key``."""

    @wraps(handler)
    def wrapper(view, request, *args, **kwargs):
        key = request.headers.get(HEADER)
        if key is None:
            return handler(view, request, *args, **kwargs)
        if not _PRINTABLE.fullmatch(key):
            raise ValidationFailed(details={HEADER: ["Must be 1-255 printable ASCII characters."]})
        principal = request.auth.key
        request_hash = _request_hash(request)
        with transaction.atomic():
            try:
                with transaction.atomic():
                    record = IdempotencyRecord.objects.create(
                        principal=principal, key=key, request_hash=request_hash, response_status=0
                    )
            except IntegrityError:
                record = IdempotencyRecord.objects.get(principal=principal, key=key)
                if record.request_hash != request_hash:
                    raise Conflict(
                        "This Idempotency-Key was used with a different request.", code="idempotency_conflict"
                    ) from None
                return _replay(record)
            # Services keep their own changes atomic and raise ApiError before or
            # instead of changing state, so what they recorded (a denied-access
            # audit event) stays. Anything else is a 500 and rolls back everything.
            try:
                response = handler(view, request, *args, **kwargs)
            except (ApiError, APIException) as exc:
                response = view.handle_exception(exc)
            if response.status_code >= 500 or response.status_code in _NOT_STORED:
                record.delete()
                return response
            record.response_status = response.status_code
            record.response_body = _seal(response.data)
            record.response_headers = {k: v for k, v in response.items() if k in ("Location", "Retry-After")}
            record.save(update_fields=["response_status", "response_body", "response_headers"])
        return response

    return wrapper


def purge_expired() -> int:
    deleted, _ = IdempotencyRecord.objects.filter(created_at__lt=timezone.now() - RETENTION).delete()
    return deleted
