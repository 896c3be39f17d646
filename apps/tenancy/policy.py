"""The one place that decides access: RBAC (the grant's role) plus ABAC (the
tenant/project of principal and object), with django-guardian object grants.

Models declare their scope: ``tenant_path`` (lookup to the tenant's UUID),
``project_path`` (lookup to the project's UUID, or None for tenant-level
objects) and optionally ``guardian_view_perm`` (an object permission that also
makes a row visible). A model without ``tenant_path`` is visible to platform
grants only: the helper fails closed.
"""

from __future__ import annotations

from django.db.models import Model, Q, QuerySet

from apps.core import audit
from apps.core.errors import Forbidden, NotFound
from apps.tenancy.principal import Principal

_NOTHING = Q(pk__in=[])


def scope_filter(model: type[Model], principal: Principal, perm: str) -> Q | None:
    """A Q selecting what ``principal`` may ``perm``; None means everything."""
    tenant_path = getattr(model, "tenant_path", None)
    project_path = getattr(model, "project_path", None)
    tenant_ids, project_ids = set(), set()
    for grant in principal.grants:
        if perm not in grant.permissions:
            continue
        if grant.tenant_id is None:
            return None
        if grant.project_id is None:
            tenant_ids.add(grant.tenant_id)
        elif project_path is not None:
            project_ids.add(grant.project_id)
        elif getattr(model, "visible_to_project_members", False):
            tenant_ids.add(grant.tenant_id)
    if tenant_path is None:
        return _NOTHING
    condition = _NOTHING
    if tenant_ids:
        condition |= Q(**{f"{tenant_path}__in": tenant_ids})
    if project_ids:
        condition |= Q(**{f"{project_path}__in": project_ids})
    guardian_perm = getattr(model, "guardian_view_perm", None)
    if guardian_perm and principal.user is not None:
        from guardian.shortcuts import get_objects_for_user

        shared = get_objects_for_user(principal.user, guardian_perm, klass=model, accept_global_perms=False)
        # Object grants never cross tenants.
        condition |= Q(pk__in=shared.values("pk")) & Q(**{f"{tenant_path}__in": principal.tenant_ids()})
    return condition


def restrict(queryset: QuerySet, principal: Principal, perm: str) -> QuerySet:
    condition = scope_filter(queryset.model, principal, perm)
    return queryset if condition is None else queryset.filter(condition)


def get_object(
    queryset: QuerySet, principal: Principal, view_perm: str, action_perm: str | None = None, **lookup
) -> Model:
    """The object the caller may see (else 404), checked for ``action_perm`` (else 403).

    Probing another tenant's object is recorded as a denied access.
    """
    obj = restrict(queryset, principal, view_perm).filter(**lookup).first()
    if obj is None:
        record_out_of_scope(
            principal, queryset.model, next(iter(lookup.values()), ""), queryset.filter(**lookup)
        )
        raise NotFound()
    if action_perm and action_perm != view_perm:
        require(principal, action_perm, obj)
    return obj


def record_out_of_scope(principal: Principal, model, target_id, existing: QuerySet) -> None:
    """Probing an object that exists outside one's scope is a denied access."""
    if existing.exists():
        audit.record(
            principal,
            f"{model._meta.model_name}.view",
            outcome=audit.DENIED,
            target_type=model._meta.model_name,
            target_id=str(target_id),
            details={"reason": "out of scope"},
        )


def _along(obj, path: str | None):
    if path is None:
        return None
    for name in path.split("__"):
        obj = getattr(obj, name)
    return obj


def require(principal: Principal, perm: str, obj: Model) -> None:
    # Read along the paths the model declares, as ``scope_filter`` filters by them; a
    # model that declares none has no scope to check and fails here (AttributeError).
    tenant_id, project_id = _along(obj, type(obj).tenant_path), _along(obj, type(obj).project_path)
    if not principal.can(perm, tenant_id, project_id):
        audit.record(principal, perm, target=obj, outcome=audit.DENIED, details={"reason": "role"})
        raise Forbidden()


def require_somewhere(principal: Principal, perm: str) -> None:
    """For lists: a caller holding ``perm`` on nothing is refused (403) rather than
    shown a list that is empty for every filter."""
    if not any(perm in grant.permissions for grant in principal.grants):
        audit.record(principal, perm, outcome=audit.DENIED, details={"reason": "role"})
        raise Forbidden()


def require_scope(principal: Principal, perm: str, tenant_id=None, project_id=None) -> None:
    """For actions on no existing object (``POST /api/tenants``)."""
    if not principal.can(perm, tenant_id, project_id):
        audit.record(
            principal,
            perm,
            outcome=audit.DENIED,
            tenant_id=tenant_id,
            project_id=project_id,
            details={"reason": "role"},
        )
        raise Forbidden()
