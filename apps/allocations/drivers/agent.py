"""The node agent as the provisioning pipeline sees it: cloud-init that installs
and enrolls it, the wait for its first heartbeat, and draining workloads."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.utils import timezone

from apps.core.drivers import mode


def cloud_init(allocation) -> str:
    """User data for the OS deploy: install the agent and enroll with a fresh bootstrap
    token, and create the flavor's runtime user (no keys: the agent writes those, so
    that it can take them all off again at release)."""
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
            # The agent manages the runtime user's keys (and makes the user if it is missing).
            "      GPUAAS_SSH=system",
            "users:",
            "  - default",
            f"  - name: {allocation.flavor.runtime_user}",
            "    shell: /bin/bash",
            "    lock_passwd: true",
            # Bare metal is the tenant's whole machine: its user administers it.
            "    sudo: ALL=(ALL) NOPASSWD:ALL",
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


# Who may log in to the node is the access app's (above the allocations too): it
# registers how to take the runtime user's keys off the node (``AccessConfig.ready``).
_access_revokers: list[Callable[[object], int]] = []


def register_access_revoker(revoker: Callable[[object], int]) -> None:
    """``revoker(allocation)`` takes the allocation's keys off its node and returns how
    many the node has yet to drop."""
    if revoker not in _access_revokers:
        _access_revokers.append(revoker)


def revoke_access(allocation) -> int:
    """Take every login key of the allocation off the node; how many are still there."""
    return sum(revoker(allocation) for revoker in _access_revokers)
