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
        # The last loop and its object, the common case: a weak-keyed lookup makes a weak
        # reference each time, calling a kept one does not. Weak, and forgotten with its
        # loop, so that a closed loop and its object (its connections) are not kept.
        self._last: tuple[weakref.ref | None, T | None] = (None, None)

    def get(self) -> T:
        loop = asyncio.get_running_loop()
        last_loop, found = self._last
        if last_loop is None or last_loop() is not loop:
            found = self._by_loop.get(loop)
            if found is None:
                found = self._by_loop[loop] = self._make()
            self._last = (weakref.ref(loop, self._forget), found)
        return found

    def _forget(self, _gone: weakref.ref) -> None:
        self._last = (None, None)  # at worst another loop's: its next get() looks it up again
