"""Host access follows the platform. A new allocation gets the profile keys of the
people who may manage it. A terminal ends at its user's logout, when its user may no
longer manage the allocation (a membership or account change), and when its
allocation leaves ACTIVE; each ends after the change commits, and both of the
terminal's sockets are told through the channel layer at once. A user's keys leave
the allocations the user may no longer manage, and a revoked service account's keys
leave every node, after the change commits. A suspended tenant's terminals end
(its keys leave its nodes by ``services.desired_for_node``)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from apps.access import services, terminals
from apps.allocations import signals as allocations
from apps.allocations.models import Allocation
from apps.tenancy import principal as principals
from apps.tenancy.models import Membership, Tenant
from apps.tenancy.services import service_account_revoked, tenant_suspension_changed


@receiver(post_save, sender=Allocation, dispatch_uid="access.seed_profile_keys")
def seed_profile_keys(sender, instance: Allocation, created: bool, raw: bool = False, **kwargs):
    if created and not raw:
        services.seed_profile_keys(instance)


@receiver(user_logged_out)
def _logged_out(sender, request, user, **kwargs):
    session_key = getattr(getattr(request, "session", None), "session_key", None)
    transaction.on_commit(lambda: terminals.end_for_login(session_key))


def _unauthorized(user) -> None:
    # What the user may do now, judged once for terminals and keys: nothing, once the
    # account is deactivated (its memberships stay).
    now = principals.for_user(user) if user.is_active else principals.ANONYMOUS
    terminals.end_unauthorized(user, now)
    services.revoke_unauthorized_keys(user, now)


@receiver([post_save, post_delete], sender=Membership)
def _membership_changed(sender, instance, **kwargs):
    user = instance.user
    transaction.on_commit(lambda: _unauthorized(user))


@receiver(post_save, sender=get_user_model())
def _user_changed(sender, instance, created, **kwargs):
    if not created:
        transaction.on_commit(lambda: _unauthorized(instance))


@receiver(service_account_revoked, dispatch_uid="access.revoke_service_account_keys")
def _service_account_revoked(sender, account, **kwargs):
    transaction.on_commit(lambda: services.revoke_service_account_keys(account))


@receiver(tenant_suspension_changed, dispatch_uid="access.end_suspended_terminals")
def _tenant_suspension_changed(sender, tenant, **kwargs):
    if tenant.status == Tenant.Status.SUSPENDED:
        tenant_id = tenant.pk
        transaction.on_commit(lambda: terminals.end_for_tenant(tenant_id))


@receiver(allocations.state_changed)
def _allocation_moved(sender, allocation, previous, **kwargs):
    if allocation.state != Allocation.State.ACTIVE:
        allocation_id = allocation.pk
        transaction.on_commit(lambda: terminals.end_for_allocation(allocation_id))
