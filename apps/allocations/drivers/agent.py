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


class _Summed:
    """What apps above the allocations register to act on an allocation's node: each
    ``hook(allocation)`` returns how many of its things the node still holds; calling
    this runs every hook and sums that."""

    def __init__(self) -> None:
        self._hooks: list[Callable[[object], int]] = []

    def register(self, hook: Callable[[object], int]) -> None:
        if hook not in self._hooks:
            self._hooks.append(hook)

    def __call__(self, allocation) -> int:
        return sum(hook(allocation) for hook in self._hooks)


# What runs on a node is the runtime's, which sits above the allocations: it registers
# how to drain an allocation (``RuntimeConfig.ready``), so the pipeline never imports it.
# ``drain(allocation)`` decommissions the app instances on the node: how many are still stopping.
drain = _Summed()

# Who may log in to the node is the access app's (above the allocations too): it
# registers how to take the runtime user's keys off the node (``AccessConfig.ready``).
# ``revoke_access(allocation)`` takes its login keys off the node: how many are still there.
revoke_access = _Summed()
