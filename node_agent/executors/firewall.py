"""Only the platform proxy reaches a node's apps (decision 0037).

An app listens on the node's address, which the tenant's network, and whoever else
reaches the node, can reach; its token would be the only lock, and everyone who could
open the app could learn it there. So from the moment its ports are picked until it
stops, the agent lets only the proxy's addresses (``proxy_addresses`` of each start
task: the portal's ``GPUAAS_PROXY_SOURCE_ADDRESSES``) and the node itself (over
``lo``: the tenant's own processes, the agent's readiness check) connect to them.

One nftables rule per instance, named by its comment, in table ``inet gpuaas``, chain
``apps`` on the prerouting hook ahead of Docker's DNAT (priority -150), so ports a
container engine publishes are held too. Rules outlive the agent, as workloads do.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from collections.abc import Iterable, Sequence

from node_agent.executors.base import TaskFailed

TABLE = "gpuaas"
CHAIN = "apps"
_SETUP = (
    f"add table inet {TABLE}\n"
    f"add chain inet {TABLE} {CHAIN} {{ type filter hook prerouting priority -150 ; policy accept ; }}\n"
)


class Firewall:
    def __init__(self, nft: Sequence[str] = ("nft",)):
        self.nft = list(nft)

    def admit_only(
        self, instance_id: str, address: str, ports: Iterable[int], proxies: Iterable[str]
    ) -> None:
        """Connections to ``ports`` on ``address`` only from ``proxies`` (addresses or
        networks) and the node itself; replaces the instance's earlier rule."""
        host = ipaddress.ip_address(address)
        if host.is_loopback:
            # The embedded default's local agent publishes on loopback, which only this
            # host reaches, and this host is the proxy's own: a rule would keep nobody
            # out (its sandboxed workloads share the host's network, docs/security.md).
            return
        allowed = [str(net) for net in map(_network, proxies) if net.version == host.version]
        if not allowed:
            raise TaskFailed(
                f"the platform names no IPv{host.version} address of its proxy "
                "(GPUAAS_PROXY_SOURCE_ADDRESSES): the app would be open to anyone who reaches "
                "the node, so it is not started"
            )
        family = "ip" if host.version == 4 else "ip6"
        rule = (
            f'add rule inet {TABLE} {CHAIN} iifname != "lo" {family} daddr {host} '
            f"tcp dport {{ {', '.join(str(port) for port in ports)} }} "
            f'{family} saddr != {{ {", ".join(allowed)} }} drop comment "{_comment(instance_id)}"\n'
        )
        # One transaction: the earlier rule goes as the new one comes, never a gap.
        self._apply(_SETUP + self._deletions(instance_id) + rule)

    def close(self, instance_id: str) -> None:
        """Drop the instance's rule (its app stopped); none there is fine."""
        deletions = self._deletions(instance_id)
        if deletions:
            self._apply(deletions)

    def _deletions(self, instance_id: str) -> str:
        try:
            listed = subprocess.run(
                [*self.nft, "--json", "--handle", "list", "chain", "inet", TABLE, CHAIN],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except FileNotFoundError:
            return ""  # no nftables, so no rule of ours (admit_only would have said)
        if listed.returncode:
            return ""  # no table yet
        comment = _comment(instance_id)
        return "".join(
            f"delete rule inet {TABLE} {CHAIN} handle {item['rule']['handle']}\n"
            for item in json.loads(listed.stdout)["nftables"]
            if item.get("rule", {}).get("comment") == comment
        )

    def _apply(self, script: str) -> None:
        try:
            done = subprocess.run(
                [*self.nft, "-f", "-"], input=script, capture_output=True, text=True, timeout=30, check=False
            )
        except FileNotFoundError:
            raise TaskFailed(
                "nftables (nft) is not installed: the agent lets only the platform proxy reach a "
                "node's apps, and cannot here (apt-get install nftables)"
            ) from None
        if done.returncode:
            detail = done.stderr.strip().splitlines()[:1] or [f"exit code {done.returncode}"]
            raise TaskFailed(f"the firewall rule for the app's ports could not be applied: {detail[0]}")


def _comment(instance_id: str) -> str:
    return f"gpuaas instance {instance_id}"


def _network(value: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        return ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise TaskFailed(f"the platform's proxy address {value!r} is not an address or a network") from None
