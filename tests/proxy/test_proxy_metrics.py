"""What an operator's Prometheus sees of the proxy."""

import re

import pytest

from tests.support.proxy import browser, open_session, route_url

pytestmark = pytest.mark.django_db(transaction=True)


def counted(body: str, kind: str, status: str) -> float:
    found = re.search(rf'gpuaas_proxy_requests_total{{kind="{kind}",status="{status}"}} ([0-9.e+]+)', body)
    return float(found.group(1)) if found else 0.0


def test_proxied_requests_and_denials_are_counted_by_outcome(launch, proxy_server, owner):
    instance = launch()
    with browser(proxy_server) as anonymous:
        before = anonymous.get(f"{proxy_server.url}/metrics").text
        assert anonymous.get(route_url(instance, "echo")).status_code == 401
    with browser(proxy_server, open_session(proxy_server, owner, instance)) as client:
        assert client.get(route_url(instance, "echo")).status_code == 200
        after = client.get(f"{proxy_server.url}/metrics").text
    assert counted(after, "http", "2xx") - counted(before, "http", "2xx") >= 1
    assert counted(after, "http", "4xx") - counted(before, "http", "4xx") >= 1
    assert "gpuaas_proxy_open_websockets 0.0" in after
