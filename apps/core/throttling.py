"""Per-principal API rate limit: a fixed-window counter in the cache (Redis in
production, so every web replica shares it), answering 429 with ``Retry-After``."""

from __future__ import annotations

import time

from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle

from apps.core import counters

_PERIODS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hour": 3600}


def parse_rate(rate: str) -> tuple[int, int]:
    count, period = rate.split("/")
    return int(count), _PERIODS[period]


class PrincipalRateThrottle(BaseThrottle):
    scope = "principal"

    def __init__(self):
        self.limit, self.period = parse_rate(api_settings.DEFAULT_THROTTLE_RATES[self.scope])
        self._wait = 0.0

    def allow_request(self, request, view) -> bool:
        principal = getattr(request, "auth", None)
        # Anonymous callers by address. REMOTE_ADDR only: uvicorn already resolves trusted
        # proxies into it, while DRF's get_ident would believe a client-sent X-Forwarded-For.
        ident = principal.key if principal is not None else f"ip:{request.META.get('REMOTE_ADDR', '')}"
        now = time.time()
        window = int(now // self.period)
        key = f"ratelimit:{ident}:{window}"
        count = counters.increment(key, self.period + 1)
        if count > self.limit:
            self._wait = (window + 1) * self.period - now
            return False
        return True

    def wait(self) -> float:
        return max(self._wait, 1.0)
