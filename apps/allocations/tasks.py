from __future__ import annotations

import time

from celery import shared_task

from apps.allocations import pipeline, services


@shared_task(
    bind=True, acks_late=True, reject_on_worker_lost=True, name="apps.allocations.tasks.advance_allocation"
)
def advance_allocation(self, allocation_id: str) -> None:
    """Run the pipeline as far as it goes, then come back when it has to wait."""
    while True:
        wait = pipeline.advance(allocation_id)
        if wait is None:
            return
        if self.request.is_eager:  # tests: no broker to hold a delayed task
            time.sleep(wait)
            continue
        self.apply_async((allocation_id,), countdown=wait)
        return


@shared_task(name="apps.allocations.tasks.reconcile_allocations")
def reconcile_allocations() -> int:
    return services.reconcile_stuck()
