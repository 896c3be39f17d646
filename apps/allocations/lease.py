"""The pipeline's lease on an allocation: which worker may run its steps now.

The lease is short (``PIPELINE_LEASE_SECONDS``, 30 s) so that a worker that dies
mid-step is noticed quickly: the beat reconciler resumes an allocation whose lease
ran out. A step may work for longer than that (a driver call that takes a while), so
while the pipeline runs, a thread renews the lease every third of its length.

The lease's expiry time is also its fencing token: taking, renewing and giving it
back are conditional UPDATEs on the value this holder wrote, so a holder that lost
its lease (it stalled past the expiry and another worker took over) can neither
extend nor clear the new holder's lease, and learns that it lost it.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta

from django.conf import settings
from django.db import close_old_connections, connection
from django.db.models import F
from django.utils import timezone

from apps.allocations.models import Allocation, AllocationStep

logger = logging.getLogger(__name__)


class Lease:
    def __init__(self, allocation_id, until: datetime):
        self.allocation_id = allocation_id
        self._until = until
        self._guard = threading.Lock()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self.lost = False

    @classmethod
    def take(cls, allocation_id) -> Lease | None:
        """The lease, when nobody holds it or its holder let it run out; else None."""
        now = timezone.now()
        row = Allocation.objects.filter(pk=allocation_id).values("lease_until", "next_check_at").first()
        if row is None or (row["lease_until"] is not None and row["lease_until"] >= now):
            return None
        until = now + timedelta(seconds=settings.PIPELINE_LEASE_SECONDS)
        # lease_until=None filters IS NULL: the update takes only what was read.
        if not Allocation.objects.filter(pk=allocation_id, lease_until=row["lease_until"]).update(
            lease_until=until
        ):
            return None  # another worker took it between the read and the update
        if row["lease_until"] is not None:  # its holder died: last seen renewing it
            unattended_since = row["lease_until"] - timedelta(seconds=settings.PIPELINE_LEASE_SECONDS)
        else:  # looked at late: a worker died holding the delayed wake-up
            unattended_since = row["next_check_at"]
        if unattended_since is not None:
            _forgive_downtime(allocation_id, unattended_since, now)
        return cls(allocation_id, until)

    def __enter__(self) -> Lease:
        self._renewer = threading.Thread(target=self._renew_until_stopped, daemon=True)
        self._renewer.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()

    def give_back(self, next_check_in: float | None) -> None:
        """Release the lease, naming when the allocation should be looked at again."""
        next_check = timezone.now() + timedelta(seconds=next_check_in) if next_check_in is not None else None
        with self._guard:
            Allocation.objects.filter(pk=self.allocation_id, lease_until=self._until).update(
                lease_until=None, next_check_at=next_check
            )

    def _renew_until_stopped(self) -> None:
        interval = settings.PIPELINE_LEASE_SECONDS / 3
        try:
            while not self._stop.wait(interval):
                if not self._renew():
                    return
        finally:
            connection.close()  # this thread's own connection

    def _renew(self) -> bool:
        close_old_connections()
        until = timezone.now() + timedelta(seconds=settings.PIPELINE_LEASE_SECONDS)
        with self._guard:
            held = Allocation.objects.filter(pk=self.allocation_id, lease_until=self._until)
            if held.update(lease_until=until):
                self._until = until
                return True
            current = Allocation.objects.filter(pk=self.allocation_id).values_list("lease_until", flat=True)
            if not current.exists():
                # The row is not visible to this thread's connection (a test's open
                # transaction holds it): nothing to renew, and nothing says it was lost.
                return True
            self.lost = True
        logger.warning("allocation %s: the lease was taken over; this worker stops", self.allocation_id)
        return False


def _forgive_downtime(allocation_id, unattended_since: datetime, now: datetime) -> None:
    """Nobody ran the allocation since ``unattended_since``: that time is not its steps'.

    Step budgets count from a step's start. Without this, a step that was running when
    its worker died is charged the time until the lease ran out and the reconciler came
    by, and may fail a customer's allocation for the platform's crash."""
    downtime = now - unattended_since
    if downtime <= timedelta(seconds=1):  # a delayed wake-up arriving on time
        return
    resumed = AllocationStep.objects.filter(
        allocation_id=allocation_id, status=AllocationStep.Status.RUNNING, started_at__isnull=False
    ).update(started_at=F("started_at") + downtime)
    logger.warning(
        "allocation %s resumed after %.1f s unattended (a worker was lost); %d running step(s) not charged",
        allocation_id,
        downtime.total_seconds(),
        resumed,
    )
