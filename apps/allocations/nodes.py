"""Node lifecycle: agent enrollment (bootstrap token, then a node credential),
the agent's address, operator approval, maintenance."""

from __future__ import annotations

import ipaddress
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.allocations.models import Allocation, Node
from apps.core import audit, crypto
from apps.core.errors import InvalidState, Unauthenticated
from apps.tenancy import policy
from apps.tenancy.principal import Principal
from apps.tenancy.roles import Perm


def issue_bootstrap_token(node: Node, *, principal: Principal | None = None) -> str:
    """A one-time token for the node's agent to enroll with; replaces any earlier one
    and expires after the node's ``bootstrap_token_hours`` (24 by default): a token
    copied into a forgotten cloud-init or ticket does not enroll a host months later.

    ``principal``: an operator asking for it (the admin), checked and audited;
    the pipeline's own cloud-init passes none. Only the hash is kept.
    """
    if principal is not None:
        policy.require_scope(principal, Perm.NODE_MANAGE)
    token = crypto.new_secret()
    now = timezone.now()
    node.bootstrap_token_expires_at = now + timedelta(hours=node.bootstrap_token_hours)
    with transaction.atomic():
        Node.objects.filter(pk=node.pk).update(
            bootstrap_token_hash=crypto.hash_secret(token),
            bootstrap_token_expires_at=node.bootstrap_token_expires_at,
            updated_at=now,
        )
        if principal is not None:
            audit.record(principal, "node.bootstrap_token_issue", target=node)
    return token


def enroll(hostname: str, bootstrap_token: str, *, address: str | None) -> tuple[Node, str]:
    """Exchange the bootstrap token for the node's own credential (the token is spent).

    ``address``: where the enrollment came from, which becomes the only address the
    agent may report its apps at (see ``serves_at``).
    """
    token_hash = crypto.hash_secret(bootstrap_token)
    credential = crypto.new_secret()
    with transaction.atomic():
        node = (
            Node.objects.select_for_update()
            .filter(hostname=hostname, bootstrap_token_hash=token_hash)
            .first()
        )
        expired = node is not None and not _unexpired(node)
        if node is not None and not expired:
            node.bootstrap_token_hash = ""
            node.bootstrap_token_expires_at = None
            node.credential_hash = crypto.hash_secret(credential)
            node.enrolled_at = node.last_heartbeat_at = timezone.now()
            node.agent_address = _plain_address(address)
            if settings.AUTO_APPROVE_NODES and not node.approved:
                node.approved = True
            if node.state == Node.State.ENROLLING and node.approved:
                node.state = Node.State.AVAILABLE
            node.save()
            audit.record(None, "node.enroll", target=node, details={"approved": node.approved})
    if expired:
        audit.count_denied(
            "node.enroll", reason="expired bootstrap token", target_type="node", target_id=hostname
        )
        raise Unauthenticated(
            f"This bootstrap token expired at {node.bootstrap_token_expires_at:%Y-%m-%d %H:%M} UTC;"
            " ask an operator to issue a new one."
        )
    if node is None:
        # Counted, not audited one row each (decision 0031): anyone can post here.
        audit.count_denied(
            "node.enroll", reason="unknown host or bootstrap token", target_type="node", target_id=hostname
        )
        raise Unauthenticated("Unknown host or bootstrap token.")
    return node, credential


def _unexpired(node: Node) -> bool:
    # No expiry recorded fails closed.
    expires = node.bootstrap_token_expires_at
    return expires is not None and timezone.now() < expires


def bootstrap_token_state(node: Node) -> str:
    """The enrollment state in words, for operators (the hashes are never shown)."""
    if node.credential_hash:
        return "enrolled (node credential issued)"
    if not node.bootstrap_token_hash:
        return "no bootstrap token issued"
    expires = node.bootstrap_token_expires_at
    if not _unexpired(node):
        when = f" at {expires:%Y-%m-%d %H:%M} UTC" if expires else ""
        return f"bootstrap token expired{when}; issue a new one"
    return f"bootstrap token issued, not used yet; expires {expires:%Y-%m-%d %H:%M} UTC"


def _plain_address(address: str | None) -> str | None:
    """An IP address as agents write it: a dual-stack listener sees IPv4 peers as
    ``::ffff:a.b.c.d``. Anything else (no peer, a Unix socket) records none."""
    try:
        parsed = ipaddress.ip_address(address or "")
    except ValueError:
        return None
    mapped = getattr(parsed, "ipv4_mapped", None)
    return str(mapped or parsed)


def serves_at(node: Node, host: str) -> bool:
    """Whether the node's agent may name ``host`` as the address of its apps, where
    the platform proxy will connect: only the address it enrolled from, never a
    name (resolved later, it could point anywhere). An agent that enrolled over
    loopback runs on the platform's own machine, where the executors publish apps on
    loopback; loopback is refused to every other node (it is the platform's own)."""
    if not node.agent_address:
        return False
    try:
        reported = ipaddress.ip_address(host)
    except ValueError:
        return False
    own = ipaddress.ip_address(node.agent_address)
    return reported == own or (own.is_loopback and reported.is_loopback)


def revoke_agent(allocation: Allocation) -> None:
    """The node leaves the allocation: its credential, any unspent bootstrap token
    and its recorded address stop counting, so a tenant who had root on it (and read
    the credential file) can no longer act as its agent. The next allocation's
    cloud-init enrolls a fresh one."""
    node = allocation.node
    revoked = (
        Node.objects.filter(pk=node.pk)
        .exclude(credential_hash="", bootstrap_token_hash="", agent_address=None)
        .update(
            credential_hash="",
            bootstrap_token_hash="",
            bootstrap_token_expires_at=None,
            agent_address=None,
            updated_at=timezone.now(),
        )
    )
    if revoked:
        audit.record(None, "node.credential_revoke", target=node, details={"allocation": str(allocation.pk)})


def agent_principal(node: Node) -> Principal:
    """The node's agent as a caller (for rate limits and audit); it holds no role."""
    return Principal(kind="node", key=f"node:{node.pk}", name=f"node:{node.hostname}")


def authenticate_agent(credential: str) -> Node:
    node = Node.objects.filter(credential_hash=crypto.hash_secret(credential)).first() if credential else None
    if node is None:
        raise Unauthenticated("Unknown node credential.")
    return node


def approve(principal: Principal, node: Node) -> Node:
    policy.require_scope(principal, Perm.NODE_MANAGE)
    with transaction.atomic():
        changes = {"approved": True, "updated_at": timezone.now()}
        Node.objects.filter(pk=node.pk).update(**changes)
        Node.objects.filter(pk=node.pk, state=Node.State.ENROLLING, enrolled_at__isnull=False).update(
            state=Node.State.AVAILABLE
        )
        audit.record(principal, "node.approve", target=node)
    node.refresh_from_db()
    return node


def set_maintenance(principal: Principal, node: Node, reason: str) -> Node:
    """Take a node out of scheduling; refused while an allocation holds it."""
    policy.require_scope(principal, Perm.NODE_MANAGE)
    with transaction.atomic():
        # allocate() reserves a node under this row lock (SKIP LOCKED): holding it
        # keeps the node from being picked meanwhile, and waiting for it means an
        # allocation committing right now is seen by the check below.
        Node.objects.select_for_update().filter(pk=node.pk).first()
        if Allocation.objects.filter(node=node, state__in=Allocation.LIVE_STATES).exists():
            raise InvalidState("The node is allocated; release it first.")
        Node.objects.filter(pk=node.pk).update(
            state=Node.State.MAINTENANCE, state_reason=reason, updated_at=timezone.now()
        )
        audit.record(principal, "node.maintenance", target=node, details={"reason": reason})
    node.refresh_from_db()
    return node


def return_to_service(principal: Principal, node: Node) -> Node:
    """From maintenance or failed back to the pool (an operator fixed it)."""
    policy.require_scope(principal, Perm.NODE_MANAGE)
    with transaction.atomic():
        changed = Node.objects.filter(
            pk=node.pk, state__in=[Node.State.MAINTENANCE, Node.State.FAILED, Node.State.OFFLINE]
        ).update(
            state=Node.State.AVAILABLE if node.approved else Node.State.ENROLLING,
            state_reason="",
            updated_at=timezone.now(),
        )
        if not changed:
            raise InvalidState(f"A node in state {node.state} cannot be returned to service.")
        audit.record(principal, "node.return_to_service", target=node)
    node.refresh_from_db()
    return node
