"""A node that is not the platform's machine: its agent reaches the portal over the
network, JupyterLab is published on the address the agent enrolled from, and the
platform proxy serves it from there (decision 0026). The machine's own network
address stands in for the remote node's; loopback is not involved on the way."""

from __future__ import annotations

import socket

import httpx
import pytest

from apps.runtime import selectors
from apps.runtime.models import AppInstance, Endpoint
from tests.support.agent import running_agent
from tests.support.instances import START_TIMEOUT, PlatformApi
from tests.support.proxy import browser, open_session, route_url
from tests.support.servers import ThreadedUvicorn

pytestmark = [pytest.mark.heavy, pytest.mark.django_db(transaction=True)]


def network_address() -> str | None:
    """This machine's address on its default route (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("198.51.100.1", 9))
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") else address


@pytest.fixture
def remote_agent(settings, active_allocation, tmp_path):
    """The portal listening on the machine's network address, and a node agent that
    reaches it there, as an agent on another machine would."""
    address = network_address()
    if address is None:
        pytest.skip("this machine has no network address besides loopback")
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, address]
    # The proxy (the portal here) connects from that address: the node's firewall admits it.
    settings.PROXY_SOURCE_ADDRESSES = [f"{address}/32"]
    portal = ThreadedUvicorn(host=address).start()
    settings.ISSUER = portal.url  # routes are planned on the portal's address
    with running_agent(portal.url, active_allocation.node, tmp_path) as agent:
        yield portal, agent, address
    portal.stop()


def test_jupyterlab_on_a_remote_node_is_served_through_the_proxy_from_the_nodes_address(
    api, allocator, project, jupyterlab, active_allocation, remote_agent
):
    portal, _, address = remote_agent
    api.force_login(allocator)
    platform = PlatformApi(api, project)
    instance_id = platform.launch(active_allocation)
    platform.wait_state(instance_id, "running", timeout=START_TIMEOUT)

    active_allocation.node.refresh_from_db()
    assert active_allocation.node.agent_address == address
    endpoint = Endpoint.objects.get(instance_id=instance_id, name="web")
    assert endpoint.host == address
    instance = AppInstance.objects.get(pk=instance_id)
    token = selectors.runtime_secret(instance, "token")
    status = f"/w/{instance_id}/web/api/status"
    direct = httpx.get(
        f"http://{address}:{endpoint.port}{status}", headers={"Authorization": f"token {token}"}
    )
    assert direct.status_code == 200
    with pytest.raises(httpx.ConnectError):  # published on the node's address, not on its loopback
        httpx.get(f"http://127.0.0.1:{endpoint.port}{status}")

    with browser(portal, open_session(portal, allocator, instance)) as client:
        lab = client.get(route_url(instance, "lab"))
        api_status = client.get(route_url(instance, "api/status"))
    assert lab.status_code == 200
    assert "JupyterLab" in lab.text
    assert token not in lab.text
    assert api_status.status_code == 200
    assert "started" in api_status.json()
