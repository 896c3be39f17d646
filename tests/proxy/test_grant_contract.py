"""The grant the portal answers nginx with is defined once (``GRANT_HEADERS``): the
Lua data plane reads exactly those headers, in that order, and the portal sends each."""

from __future__ import annotations

import re

from apps.proxy.authrequest import GRANT_HEADERS
from tests.support.nginx import CONF_DIR


def lua_table(name: str) -> tuple[str, ...]:
    source = (CONF_DIR / "gpuaas.lua").read_text()
    body = re.search(rf"^local {name} = \{{(.*?)\}}", source, re.S | re.M)
    assert body, f"gpuaas.lua has no table {name}"
    return tuple(re.findall(r'"([^"]+)"', body.group(1)))


def test_gpuaas_lua_reads_the_grant_the_portal_defines():
    assert lua_table("HEADERS") == GRANT_HEADERS


def test_the_first_headers_are_the_variables_nginx_proxies_with():
    variables = lua_table("VARIABLES")
    names = {
        "g_upstream": "x-gpuaas-upstream",
        "g_public": "x-gpuaas-public-prefix",
        "g_from": "x-gpuaas-rewrite-from",
        "g_forwarded": "x-gpuaas-forwarded-prefix",
        "g_frame": "x-gpuaas-frame-ancestors",
    }
    assert tuple(names[variable] for variable in variables) == GRANT_HEADERS[: len(variables)]
