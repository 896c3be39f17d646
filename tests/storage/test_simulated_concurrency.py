"""The simulated DDN and UFM keep every change when a tenant's nodes join (or leave)
its NodeMap and partition key at the same time: each is a read-modify-write of one
row, which would otherwise lose a concurrent one."""

from __future__ import annotations

import pytest

from apps.core import simulation
from apps.storage.drivers.ddn import SimulatedDdn
from apps.storage.drivers.ufm import SimulatedUfm
from tests.support.concurrency import at_once

pytestmark = pytest.mark.django_db(transaction=True)

WORKERS = 8


def test_nodes_joining_a_nodemap_together_are_all_in_it():
    ddn = SimulatedDdn()
    ddn.create_nodemap("acme-map", "/lustre/acme/")
    at_once([lambda i=i: ddn.add_node("acme-map", f"gpu-{i}") for i in range(WORKERS)])
    assert simulation.get("ddn", "nodemap", "acme-map").state["nodes"] == sorted(
        f"gpu-{i}" for i in range(WORKERS)
    )
    at_once([lambda i=i: ddn.remove_node("acme-map", f"gpu-{i}") for i in range(1, WORKERS, 2)])
    assert simulation.get("ddn", "nodemap", "acme-map").state["nodes"] == [
        f"gpu-{i}" for i in range(0, WORKERS, 2)
    ]


def test_guids_added_to_a_partition_key_together_are_all_in_it():
    ufm = SimulatedUfm()
    # The key does not exist yet: the first to come makes it.
    at_once([lambda i=i: ufm.add_guids("0x8001", [f"0x{i:016x}"]) for i in range(WORKERS)])
    assert simulation.get("ufm", "pkey", "0x8001").state["guids"] == [f"0x{i:016x}" for i in range(WORKERS)]
