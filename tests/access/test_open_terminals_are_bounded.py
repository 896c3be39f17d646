"""An allocation has at most ``GPUAAS_TERMINAL_MAX_LIVE_PER_ALLOCATION`` terminals open:
one more is refused with the figures, and an ended one gives its place back."""

from __future__ import annotations

import pytest
from django.utils import timezone

from apps.access import terminals
from apps.access.models import TerminalSession
from apps.core.errors import Conflict
from apps.tenancy import principal as principals

pytestmark = pytest.mark.django_db


def test_an_allocation_at_its_terminal_cap_refuses_one_more(active_allocation, allocator, settings):
    settings.TERMINAL_MAX_LIVE_PER_ALLOCATION = 2
    principal = principals.for_user(allocator)
    first, _ = (terminals.open_session(principal, active_allocation.pk, cols=80, rows=24) for _ in range(2))

    with pytest.raises(Conflict) as refused:
        terminals.open_session(principal, active_allocation.pk, cols=80, rows=24)
    assert refused.value.message == "This allocation already has 2 terminals open."
    assert refused.value.details == {"resource": "terminals", "limit": 2, "used": 2, "requested": 1}

    TerminalSession.objects.filter(pk=first.pk).update(
        state=TerminalSession.State.ENDED, ended_at=timezone.now()
    )
    assert terminals.open_session(principal, active_allocation.pk, cols=80, rows=24)
