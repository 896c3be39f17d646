"""Read-side querysets the portal pages share: scoped with ``policy.restrict``
and shaped so a page costs a fixed number of queries whatever its length."""

from __future__ import annotations

from django.db.models import Count, F, IntegerField, OuterRef, Prefetch, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce

from apps.allocations.models import Allocation
from apps.runtime import selectors as runtime
from apps.runtime.models import AppInstance
from apps.tenancy import policy
from apps.tenancy.models import Membership, Project, Quota, ServiceAccount, Tenant
from apps.tenancy.principal import Principal
from apps.tenancy.roles import Perm


def _count_per_project(queryset: QuerySet) -> Coalesce:
    counted = (
        queryset.filter(project=OuterRef("pk"))
        .order_by()
        .values("project")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Coalesce(Subquery(counted, output_field=IntegerField()), Value(0))


def visible_projects(principal: Principal) -> QuerySet[Project]:
    return policy.restrict(Project.objects.select_related("tenant"), principal, Perm.PROJECT_VIEW)


def projects_with_counts(principal: Principal) -> QuerySet[Project]:
    """Visible projects with ``member_count`` and ``active_account_count`` (one query, no N+1)."""
    return (
        visible_projects(principal)
        .annotate(
            member_count=_count_per_project(Membership.objects.all()),
            active_account_count=_count_per_project(ServiceAccount.objects.filter(revoked_at__isnull=True)),
        )
        .order_by(*Project.LIST_ORDER)
    )


def visible_tenants(principal: Principal) -> QuerySet[Tenant]:
    """Tenants with the quota rows the caller may read as ``visible_quotas``."""
    quotas = policy.restrict(Quota.objects.order_by("resource"), principal, Perm.QUOTA_VIEW)
    return policy.restrict(Tenant.objects.all(), principal, Perm.TENANT_VIEW).prefetch_related(
        Prefetch("quotas", queryset=quotas, to_attr="visible_quotas")
    )


def creatable_tenants(principal: Principal) -> QuerySet[Tenant]:
    """Tenants where the caller may create projects (tenant-wide grants only)."""
    tenants = policy.restrict(Tenant.objects.all(), principal, Perm.PROJECT_CREATE)
    allowed = [t.pk for t in tenants if principal.can(Perm.PROJECT_CREATE, t.pk)]
    return Tenant.objects.filter(pk__in=allowed)


def project_members(project: Project) -> QuerySet[Membership]:
    return (
        Membership.objects.filter(project=project).select_related("user").order_by("user__username", "role")
    )


def tenant_wide_members(project: Project) -> QuerySet[Membership]:
    """People who reach the project through a tenant-wide role (read-only here)."""
    return (
        Membership.objects.filter(tenant_id=project.tenant_id, project__isnull=True)
        .select_related("user")
        .order_by("user__username", "role")
    )


def project_service_accounts(project: Project) -> QuerySet[ServiceAccount]:
    # Active accounts first, then the most recently revoked; names repeat (a revoked
    # account's name is reused), so the pk keeps the pages from overlapping.
    return ServiceAccount.objects.filter(project=project).order_by(
        F("revoked_at").desc(nulls_first=True), "name", "pk"
    )


def live_allocations(principal: Principal) -> QuerySet[Allocation]:
    """The caller's allocations that hold (or are taking, or giving back) a node, newest first."""
    return policy.restrict(
        Allocation.objects.filter(state__in=Allocation.LIVE_STATES).select_related(
            "node", "flavor", "project"
        ),
        principal,
        Perm.ALLOCATION_VIEW,
    ).order_by("-created_at", "pk")


def live_instances(principal: Principal) -> QuerySet[AppInstance]:
    """The app instances the caller sees that run or are on their way (not stopped,
    failed or deleted), newest first."""
    State = AppInstance.State
    live = (State.REQUESTED, State.STARTING, State.RUNNING, State.STOPPING, State.DECOMMISSIONING)
    return (
        runtime.visible_instances(principal)
        .filter(state__in=live)
        .select_related("app", "project", "allocation__node")
        .defer("parameters")
        .order_by("-created_at", "pk")
    )
