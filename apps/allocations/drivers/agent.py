"""The node agent as the provisioning pipeline sees it: cloud-init that installs
and enrolls it, the wait for its first heartbeat, and draining workloads."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.utils import timezone

from apps.core.drivers import mode


def cloud_init(allocation) -> str:
    """User data for the OS deploy: install the agent and enroll with a fresh bootstrap token."""
    from apps.allocations import nodes

    token = nodes.issue_bootstrap_token(allocation.node)
    return "\n".join(
        [
            "#cloud-config",
            "write_files:",
            "  - path: /etc/gpuaas/agent.env",
            "    permissions: '0600'",
            "    content: |",
            f"      GPUAAS_URL={settings.ISSUER}",
            f"      GPUAAS_NODE={allocation.node.hostname}",
            f"      GPUAAS_BOOTSTRAP_TOKEN={token}",
            "runcmd:",
            "  - [systemctl, enable, --now, gpuaas-agent.service]",
            "",
        ]
    )


def registered(node, since) -> bool:
    """Whether the node's agent has reported in since the step began.

    On simulated hardware there is no agent process unless one was started
    for the node (the demo's local agent enrolls itself); otherwise the
    simulated cloud-init's agent registers as soon as the OS is up.
    """
    node.refresh_from_db(fields=["last_heartbeat_at", "credential_hash", "enrolled_at"])
    if node.last_heartbeat_at and node.last_heartbeat_at >= since:
        return True
    if mode("maas") == "simulated" and not node.credential_hash:
        now = timezone.now()
        type(node).objects.filter(pk=node.pk).update(
            enrolled_at=node.enrolled_at or now, last_heartbeat_at=now
        )
        return True
    return False


# What runs on a node is the runtime's, which sits above the allocations: it registers
# how to drain an allocation (``RuntimeConfig.ready``), so the pipeline never imports it.
_drainers: list[Callable[[object], int]] = []


def register_drainer(drainer: Callable[[object], int]) -> None:
    """``drainer(allocation)`` decommissions what runs on the allocation's node and
    returns how many workloads are still stopping."""
    if drainer not in _drainers:
        _drainers.append(drainer)


def drain(allocation) -> int:
    """Decommission the app instances on the node; how many are still stopping."""
    return sum(drainer(allocation) for drainer in _drainers)
