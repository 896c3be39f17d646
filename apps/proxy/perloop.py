"""One object per running event loop: the proxy's connections (to Redis, to apps)
belong to the loop that opened them. One loop per process in production, one per
server in tests."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PerLoop(Generic[T]):
    def __init__(self, make: Callable[[], T]):
        self._make = make
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, T] = weakref.WeakKeyDictionary()
        self._last: tuple[asyncio.AbstractEventLoop | None, T | None] = (None, None)

    def get(self) -> T:
        loop = asyncio.get_running_loop()
        last_loop, found = self._last
        if last_loop is not loop:
            # A weak-keyed lookup makes a weak reference each time: the common case skips it.
            found = self._by_loop.get(loop)
            if found is None:
                found = self._by_loop[loop] = self._make()
            self._last = (loop, found)
        return found
