"""Calls raced against each other (for the tests of what must happen once), and calls
moved off a browser test's thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.db import connection


def at_once(calls: list[Callable[[], Any]], *, answers: tuple[type[BaseException], ...] = ()) -> list:
    """Each call in a thread of its own, all released together, each on its own
    database connection; what each returned, in order. An exception of a type in
    ``answers`` is that call's result (a refusal the test expects); any other fails
    the test."""
    start = threading.Barrier(len(calls))
    results, errors = [None] * len(calls), []

    def run(index: int, call: Callable[[], Any]) -> None:
        try:
            start.wait(timeout=30)
            results[index] = call()
        except answers as exc:
            results[index] = exc
        except BaseException as exc:  # noqa: BLE001 - any other failure fails the test below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, call)) for i, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    return results


def a_lock_waiter(timeout: float = 20.0) -> bool:
    """Whether a connection to the test database comes to wait on a lock (PostgreSQL)
    within ``timeout``: the sign that a raced call is held back by one in progress."""
    deadline = time.monotonic() + timeout
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0]:
                return True
            time.sleep(0.01)
    return False


def in_own_thread(call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)`` in a thread of its own, its database connection given back after:
    Playwright's event loop in a browser test's thread forbids the synchronous
    channel-layer sends that launching or allocating makes. (A connection left open
    there stays taken from the pool of the session's live servers.)"""

    def run() -> Any:
        try:
            return call(*args)
        finally:
            connection.close()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()
