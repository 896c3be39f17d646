"""Data that every test of a module starts from, made once per module and worker.

Django's ``TestCase.setUpTestData`` for pytest: the data is made in a transaction that
stays open while the module's tests run, each test in a savepoint of it (pytest-django's
``db`` nests its atomic blocks), and rolled back after the last one. A test gets a deep
copy of the objects, so what it changes in memory or in the database never reaches the
next. Building the policy matrix's two tenants for each of its 327 tests took a fifth
of the matrix's time (2026-11-29).

Only for modules whose tests are all plain ``django_db``: a transactional test or a live
server would commit through the open transaction, or not see its data at all.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import fields

import pytest
from django.db import transaction
from django.test import TestCase, override_settings

from tests.support.fleet import ActiveFleet, active_fleet


@contextmanager
def made_once(django_db_blocker, make: Callable[[], object], **settings) -> Iterator[object]:
    """Make ``make()``'s data (under ``settings``) for a module; yields the objects.
    Hand each test ``copy.deepcopy`` of them (``fresh``)."""
    with django_db_blocker.unblock(), transaction.atomic(), override_settings(**settings):
        try:
            yield make()
        finally:
            transaction.set_rollback(True)


def fresh(objects):
    """A test's own copy of a module's data (model instances included)."""
    return copy.deepcopy(objects)


def active_fleet_fixtures() -> dict:
    """Module fixtures named as conftest's (``tenant``, ``ready_tenant``, ``project``,
    ``flavor``, ``nodes``, ``allocator``, ``active_allocation``, ``jupyterlab``), all from
    one ``ActiveFleet`` made once per module; a module puts them in its namespace with
    ``globals().update(active_fleet_fixtures())``, and its tests ask for them as before.
    The allocation runs through the real pipeline once, not once a test."""

    @pytest.fixture(scope="module")
    def module_fleet(django_db_setup, django_db_blocker):
        with made_once(django_db_blocker, lambda: active_fleet(TestCase.captureOnCommitCallbacks)) as made:
            yield made

    @pytest.fixture
    def fleet(db, module_fleet) -> ActiveFleet:
        return fresh(module_fleet)

    def part(name: str, field: str):
        return pytest.fixture(name=name)(lambda fleet: getattr(fleet, field))

    named = {field.name: field.name for field in fields(ActiveFleet)} | {"ready_tenant": "tenant"}
    return {"module_fleet": module_fleet, "fleet": fleet} | {
        name: part(name, field) for name, field in named.items()
    }
