"""A tenant's nodes join its storage when their allocation is provisioned (NodeMap and
PKey) and leave it on release; against the simulated and the real drivers."""

from __future__ import annotations

import pytest

from apps.storage import services
from tests.factories import NodeFactory

pytestmark = pytest.mark.django_db


def test_nodes_join_the_tenants_nodemap_and_pkey_and_leave_on_release(tenant, storage_backend):
    storage = services.provision_tenant_storage(tenant)
    # Hostnames resolve to the nodes' InfiniBand addresses; loopback ones here.
    first = NodeFactory(hostname="127.0.0.11", ib_guid="0x000000000000a011")
    second = NodeFactory(hostname="127.0.0.12", ib_guid="0x000000000000a012")

    answer = services.attach_node(tenant.pk, first)
    assert answer == {"pkey": storage.pkey, "nodemap": storage.nodemap, "path": "/lustre/acme/"}
    services.attach_node(tenant.pk, second)
    services.attach_node(tenant.pk, second)  # a retried pipeline step
    assert storage_backend.members(storage) == {
        "nodemap": ["127.0.0.11", "127.0.0.12"],
        "pkey": ["0x000000000000a011", "0x000000000000a012"],
    }

    services.detach_node(tenant.pk, first)
    services.detach_node(tenant.pk, first)
    assert storage_backend.members(storage) == {"nodemap": ["127.0.0.12"], "pkey": ["0x000000000000a012"]}
