"""Data that every test of a module starts from, made once per module and worker.

Django's ``TestCase.setUpTestData`` for pytest: the data is made in a transaction that
stays open while the module's tests run, each test in a savepoint of it (pytest-django's
``db`` nests its atomic blocks), and rolled back after the last one. A test gets a deep
copy of the objects, so what it changes in memory or in the database never reaches the
next. Building the policy matrix's two tenants for each of its 327 tests took a fifth
of the matrix's time (2026-11-29).

Only for modules whose tests are all plain ``django_db``: a transactional test or a live
server would commit through the open transaction, or not see its data at all. For
those, ``kept`` makes the data once and keeps its rows, and each test puts them back
(``restored``): committed, for the servers to see, and emptied by the test's flush.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields

import pytest
from django.apps import apps
from django.db import connection, transaction
from django.test import TestCase, override_settings

from tests.support.fleet import ActiveFleet, active_fleet
from tests.support.flushing_postgresql.base import KEPT


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


def made_once_fixtures(make: Callable[[], object], name: str = "world", **settings) -> dict:
    """Fixtures for a module's namespace (``globals().update(...)``): ``made_once_data``
    makes ``make()``'s data once for the module (``made_once``, under ``settings``), and
    ``<name>`` is a test's fresh copy of it, under the same settings."""

    @pytest.fixture(scope="module")
    def made_once_data(django_db_setup, django_db_blocker):
        with made_once(django_db_blocker, make, **settings) as made:
            yield made

    # The module's transaction is asked for before ``db``, so the test's is inside it.
    @pytest.fixture(name=name)
    def data(request, made_once_data, db):
        for setting, value in settings.items():
            setattr(request.getfixturevalue("settings"), setting, value)
        return fresh(made_once_data)

    return {"made_once_data": made_once_data, name: data}


def fields_as_fixtures(source: str, **named: str) -> dict:
    """Fixtures for a module's namespace, each one field of the object fixture ``source``
    gives: ``name=field`` pairs."""

    def part(name: str, field: str):
        def fixture(**given):
            return getattr(given[source], field)

        # Asked for by name, not through ``request``: pytest then sets ``source`` (and a
        # module's data it stands on) up before the test's own transaction.
        fixture.__signature__ = inspect.Signature([inspect.Parameter(source, inspect.Parameter.KEYWORD_ONLY)])
        return pytest.fixture(name=name)(fixture)

    return {name: part(name, field) for name, field in named.items()}


def active_fleet_fixtures() -> dict:
    """Fixtures named as conftest's (``tenant``, ``ready_tenant``, ``project``, ``flavor``,
    ``nodes``, ``allocator``, ``active_allocation``, ``jupyterlab``) for a module's
    namespace, all from one ``ActiveFleet`` made once per module: the allocation runs
    through the real pipeline once, not once a test."""
    return made_once_fixtures(lambda: active_fleet(TestCase.captureOnCommitCallbacks), "fleet") | (
        fields_as_fixtures("fleet", ready_tenant="tenant", **{f.name: f.name for f in fields(ActiveFleet)})
    )


@dataclass(frozen=True)
class Kept:
    """Objects ``make()`` returned, and the rows it wrote: each table's, as JSON."""

    objects: object
    rows: dict[str, str]


def kept(django_db_blocker, make: Callable[[], object]) -> Kept:
    """Make ``make()``'s data in a transaction that is rolled back at once, keeping the
    rows it added (PostgreSQL only). It may add rows, not change those it found."""
    with django_db_blocker.unblock(), transaction.atomic():
        tables = _tables()
        before = _rows(tables)
        objects = make()
        after = _rows(tables)
        transaction.set_rollback(True)
    changed = [t for t in tables if any(after[t].get(pk) != row for pk, row in before[t].items())]
    assert not changed, f"kept: make() changed rows it found in {changed}"
    added = {
        table: "[" + ",".join(row for pk, row in rows.items() if pk not in before[table]) + "]"
        for table, rows in after.items()
        if rows.keys() - before[table].keys()
    }
    return Kept(objects, added)


def restored(data: Kept):
    """Put ``data``'s rows back, in one statement (foreign keys are checked at commit,
    so the tables' order does not matter); the test's own copy of its objects."""
    quote = connection.ops.quote_name
    inserts = [
        f"t{n} AS (INSERT INTO {table} SELECT * FROM json_populate_recordset(NULL::{table}, %s))"
        for n, table in enumerate(map(quote, data.rows))
    ]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"WITH {', '.join(inserts)} SELECT 1", list(data.rows.values()))
    return fresh(data.objects)


def _tables() -> dict[str, str]:
    """Each table of a model, and its primary key's column; not those the flush keeps
    (whose rows are never put back)."""
    existing = set(connection.introspection.table_names()) - KEPT
    return {
        model._meta.db_table: model._meta.pk.column
        for model in apps.get_models(include_auto_created=True)
        if model._meta.db_table in existing
    }


def _rows(tables: dict[str, str]) -> dict[str, dict[str, str]]:
    """Every row of ``tables`` as JSON, by table and primary key: one query."""
    quote = connection.ops.quote_name
    query = " UNION ALL ".join(
        f"SELECT %s, t.{quote(pk)}::text, row_to_json(t)::text FROM {quote(table)} t"
        for table, pk in tables.items()
    )
    found: dict[str, dict[str, str]] = {table: {} for table in tables}
    with connection.cursor() as cursor:
        cursor.execute(query, list(tables))
        for table, pk, row in cursor.fetchall():
            found[table][pk] = row
    return found
