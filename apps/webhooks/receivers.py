"""Where a delivery to a tenant's receiver may connect: public addresses only, so
that a tenant's URL never reaches the platform's own network (the metadata
service, Redis, the admin on loopback) from inside it.

Checking the name when the subscription is made is not enough: the name's owner
can answer a public address then and a private one later (DNS rebinding), or a
different one between the check and the connection. So every attempt resolves
the name once, refuses when any answer is not public, and connects to the address
it checked, sending the URL's name as the Host header and TLS server name (the
certificate is still verified against the name). Networks an operator lists in
``GPUAAS_WEBHOOK_ALLOWED_NETWORKS`` count as public (an on-premises CCP).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Callable

import httpx
from django.conf import settings

from apps.core import outbound

# These IPv6 addresses carry an IPv4 address a gateway or tunnel would connect to:
# NAT64's well-known prefix and the deprecated IPv4-compatible ones (6to4's 2002::/16
# has ``sixtofour``), which Python counts as global whatever they carry.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_METADATA = ipaddress.ip_address("169.254.169.254")


class Refused(Exception):
    """The receiver's name answers an address deliveries must not reach."""


class Unresolved(Exception):
    """The receiver's name does not resolve (now: DNS may answer on a retry)."""


def _system_resolver(host: str, port: int) -> list[str]:
    return [info[4][0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


def resolver() -> Callable[[str, int], list[str]]:
    """``settings.WEBHOOK_RESOLVER`` (the tests' DNS), else the system's."""
    return settings.WEBHOOK_RESOLVER or _system_resolver


def refusal(address: str) -> str | None:
    """Why deliveries must not connect to ``address``; None when they may."""
    ip = ipaddress.ip_address(address.split("%")[0])
    if ip.version == 6 and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    elif ip.version == 6 and ip.sixtofour:
        ip = ip.sixtofour
    elif ip in _NAT64 or ip in _IPV4_COMPATIBLE:
        ip = ipaddress.ip_address(int(ip) & 0xFFFFFFFF)
    if any(ip in ipaddress.ip_network(network) for network in settings.WEBHOOK_ALLOWED_NETWORKS):
        return None
    if ip == _METADATA:
        return "the cloud metadata address"
    if ip.is_multicast:
        return "a multicast address"
    if not ip.is_global:
        return "a private, loopback, link-local or reserved address"
    return None


def checked_addresses(host: str, port: int) -> list[str]:
    """Every address ``host`` answers, all of them allowed: a name that answers one
    private address among public ones would reach it on some connection."""
    addresses = [host] if _literal(host) else _resolved(host, port)
    for address in addresses:
        reason = refusal(address)
        if reason is not None:
            # Not which address: a tenant would learn what the platform's own DNS answers.
            shown = "" if address == host else " resolves to"
            raise Refused(f"refused: {host}{shown} {reason}")
    return addresses


def _literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _resolved(host: str, port: int) -> list[str]:
    try:
        addresses = resolver()(host, port)
    except (OSError, UnicodeError) as exc:
        raise Unresolved(f"{host} does not resolve: {exc}") from None
    if not addresses:
        raise Unresolved(f"{host} does not resolve")
    return addresses


def post(url: str, *, content: bytes, headers: dict[str, str], timeout: float) -> httpx.Response:
    """POST to ``url`` on the address checked for it (the first one), never another.
    Directly: an HTTP proxy from the environment would resolve the name again.

    The answer's status and headers, its body unread, within ``timeout`` in all:
    httpx's timeout bounds each read, and a receiver sending a byte now and then
    would hold the worker (and each next one the sweeper gives the delivery to) for
    as long as it liked."""
    target = httpx.URL(url)
    host = target.raw_host.decode("ascii")
    address = checked_addresses(host, target.port or (443 if target.scheme == "https" else 80))[0]
    request = {
        "url": target.copy_with(host=address),
        "content": content,
        "headers": {**headers, "Host": target.netloc.decode("ascii")},
        "extensions": {"sni_hostname": host},
    }
    return asyncio.run(_post_within(timeout, request))


async def _post_within(timeout: float, request: dict) -> httpx.Response:
    try:
        async with asyncio.timeout(timeout):
            async with (
                httpx.AsyncClient(trust_env=False, timeout=timeout, verify=outbound.tls()) as client,
                client.stream("POST", **request) as response,
            ):
                return response
    except TimeoutError:
        raise httpx.TimeoutException(f"Timeout: no answer within {timeout:g} s") from None
