"""The simulated DDN and UFM keep every change when a tenant's nodes join (or leave)
its NodeMap and partition key at the same time: each is a read-modify-write of one
row, which would otherwise lose a concurrent one."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from apps.core import simulation
from apps.storage.drivers.ddn import SimulatedDdn
from apps.storage.drivers.ufm import SimulatedUfm

pytestmark = pytest.mark.django_db(transaction=True)

WORKERS = 8


def at_once(work) -> None:
    """``work(i)`` in WORKERS threads released together, each on its own connection."""
    start, errors = threading.Barrier(WORKERS), []

    def run(i: int) -> None:
        try:
            start.wait()
            work(i)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


def test_nodes_joining_a_nodemap_together_are_all_in_it():
    ddn = SimulatedDdn()
    ddn.create_nodemap("acme-map", "/lustre/acme/")
    at_once(lambda i: ddn.add_node("acme-map", f"gpu-{i}"))
    assert simulation.get("ddn", "nodemap", "acme-map").state["nodes"] == sorted(
        f"gpu-{i}" for i in range(WORKERS)
    )
    at_once(lambda i: ddn.remove_node("acme-map", f"gpu-{i}") if i % 2 else None)
    assert simulation.get("ddn", "nodemap", "acme-map").state["nodes"] == [
        f"gpu-{i}" for i in range(0, WORKERS, 2)
    ]


def test_guids_added_to_a_partition_key_together_are_all_in_it():
    ufm = SimulatedUfm()
    at_once(lambda i: ufm.add_guids("0x8001", [f"0x{i:016x}"]))  # the key is made by the first
    assert simulation.get("ufm", "pkey", "0x8001").state["guids"] == [f"0x{i:016x}" for i in range(WORKERS)]
