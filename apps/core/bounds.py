"""Bounds on the rows a tenant, its service accounts or an app's node agent can make
again and again (the standard: every buffer they can fill has a bound).

Two kinds, one helper each:

- ``require_room``: a cap on what one owner keeps (a tenant's projects, a project's
  service accounts, an allocation's keys), checked where the service adds a row. A
  refusal is 409 ``conflict``, not 422 ``quota_exceeded``: CONTRACT.md's 422 means the
  tenant's quota, which CCP can raise (``POST /api/metering/quota``); these caps are the
  platform's own, and the way past one is to remove something first. The details carry
  the same figures a quota refusal does (``resource``, ``limit``, ``used``, ``requested``).
- ``keep_newest``: history that only accumulates (an instance's events, operations),
  trimmed to its newest rows as each new one is written.
"""

from __future__ import annotations

from django.db import models
from django.db.models import QuerySet

from apps.core.errors import Conflict


def require_room(owner: models.Model, kept: QuerySet, limit: int, *, resource: str, message: str) -> None:
    """Refuse with ``message`` when ``kept`` (the rows of ``resource`` that ``owner``
    holds) already number ``limit``.

    Call it inside the transaction that adds the row: it locks ``owner``'s row before
    counting, so two requests cannot both take the last place; the lock holds until the
    caller commits, by when its new row counts for the next. (SQLite has no row locks;
    its single writer serializes instead.)
    """
    owner._meta.model._default_manager.select_for_update().filter(pk=owner.pk).exists()
    used = kept.count()
    if used >= limit:
        raise Conflict(message, details={"resource": resource, "limit": limit, "used": used, "requested": 1})


def keep_newest(rows: QuerySet, keep: int, *, by: str = "id") -> int:
    """Delete all of ``rows`` but the newest ``keep``, newest by ``by`` (a field that
    grows as rows are added); how many went. With an index on ``rows``' filter and
    ``by``, the boundary is one index range scan."""
    boundary = rows.order_by(f"-{by}").values_list(by, flat=True)[keep - 1 : keep]
    if not boundary:
        return 0
    return rows.filter(**{f"{by}__lt": boundary[0]}).delete()[0]
