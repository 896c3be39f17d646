"""What the allocations tell the apps above them (they connect in their
``AppConfig.ready``), so the allocations never import them. Sent inside the
transaction of the change."""

from django.dispatch import Signal

# ``allocation``, ``previous``: the allocation moved from ``previous`` to its state.
state_changed = Signal()
