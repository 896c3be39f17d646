"""What other apps (the platform proxy above all) read of the runtime."""

from __future__ import annotations

from django.db.models import Q, QuerySet

from apps.core import secrets
from apps.runtime.models import AppInstance, RuntimeSecret
from apps.tenancy import policy
from apps.tenancy.principal import Principal
from apps.tenancy.roles import Perm

State = AppInstance.State
RUNNING = State.RUNNING


def visible_instances(principal: Principal) -> QuerySet[AppInstance]:
    """The one scope for instances: admins see every instance in their scope; others
    those shared with their project, their own while they may still view the
    project's instances, and those shared with them by name (decision 0011)."""
    instances = AppInstance.objects.all()
    managed = policy.scope_filter(AppInstance, principal, Perm.INSTANCE_MANAGE)
    if managed is None:
        return instances
    # A platform-wide view grant (CCP's integration role) is a member's view on every
    # project: instances shared with their project, never the private ones.
    member_scope = policy.scope_filter(AppInstance, principal, Perm.INSTANCE_VIEW) or Q()
    as_member = Q(shared_with_project=True)
    if principal.user is not None:
        # Membership decides, not ownership: removed from the project, the owner
        # no longer sees the instance however many roles they hold elsewhere.
        as_member |= Q(owner=principal.user)
    return instances.filter(managed | (member_scope & as_member))


def deleted_by_release(allocation) -> QuerySet[AppInstance]:
    """The instances releasing ``allocation`` deletes: every one not yet gone with a
    member on it (a cluster loses the whole instance with one of its nodes)."""
    return AppInstance.objects.filter(
        Q(allocation=allocation) | Q(members__allocation=allocation),
        state__in=[*AppInstance.ACTIVE_STATES, State.STOPPED, State.FAILED],
    ).distinct()


def find_instance(pk) -> AppInstance | None:
    return AppInstance.objects.filter(pk=pk).first()


def instances() -> QuerySet[AppInstance]:
    """Every instance, for the platform's own sweeps; never an answer to a caller
    (``visible_instances`` is)."""
    return AppInstance.objects.all()


def running_instances() -> QuerySet[AppInstance]:
    return AppInstance.objects.filter(state=RUNNING)


def runtime_secret(instance: AppInstance, name: str) -> str | None:
    """For the platform's own use (the proxy's auth bridge); never for an API answer."""
    secret = RuntimeSecret.objects.filter(instance=instance, name=name).first()
    return secrets.read_named(secret.secret_path if secret else None)


def quota_usage(tenant) -> dict[str, int]:
    """The app instances the tenant holds (``apps.tenancy.quotas``): every one not yet
    deleted, a stopped or failed one too, since starting it again takes no new quota."""
    return {"app_instances": AppInstance.objects.filter(tenant=tenant).exclude(state=State.DELETED).count()}
