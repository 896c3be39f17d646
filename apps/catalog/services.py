"""Catalog operations: publishing app versions, entitlements, and what a caller may see."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from apps.catalog import manifests
from apps.catalog.models import App, AppVersion, Artifact, Entitlement
from apps.core import audit
from apps.core.errors import Forbidden, InvalidState, ValidationFailed
from apps.tenancy import policy
from apps.tenancy.principal import Principal
from apps.tenancy.roles import Perm

# ``published_by`` of the versions the platform publishes itself (``bootstrap_demo``).
PLATFORM = "platform"


def publish_version(principal: Principal | None, app: App, *, version: str, manifest: dict) -> AppVersion:
    """Validate and publish; an invalid manifest fails with every schema error listed."""
    if principal is not None:
        policy.require_scope(principal, Perm.CATALOG_MANAGE)
    errors = manifests.validate(manifest)
    if errors:
        raise ValidationFailed("The manifest is not valid.", details={"manifest": errors})
    with transaction.atomic():
        app_version, created = AppVersion.objects.get_or_create(
            app=app, version=version, defaults={"manifest": manifest}
        )
        if not created:
            if app_version.status != AppVersion.Status.DRAFT and app_version.manifest != manifest:
                raise InvalidState(f"{app.slug} {version} is already published; publish a new version.")
            app_version.manifest = manifest
        app_version.status = AppVersion.Status.PUBLISHED
        app_version.published_at = app_version.published_at or timezone.now()
        app_version.published_by = principal.name if principal else PLATFORM
        app_version.save()
        app_version.artifacts.all().delete()
        Artifact.objects.bulk_create(
            Artifact(
                app_version=app_version,
                name=a["name"],
                image=a["image"],
                digest=a["digest"],
                platform=a.get("platform", "linux/amd64"),
            )
            for a in manifest["artifacts"]
        )
        audit.record(
            principal, "catalog.publish", target=app_version, details={"app": app.slug, "version": version}
        )
    return app_version


def entitle(principal: Principal | None, app: App, tenant, project=None) -> Entitlement:
    if principal is not None:
        policy.require_scope(principal, Perm.CATALOG_MANAGE)
    entitlement, created = Entitlement.objects.get_or_create(
        app=app,
        tenant=tenant,
        project=project,
        defaults={"granted_by": principal.name if principal else PLATFORM},
    )
    if created:
        audit.record(principal, "catalog.entitle", target=entitlement, details={"app": app.slug})
    return entitlement


def _entitlement_filter(principal: Principal) -> Q | None:
    """Apps entitled somewhere the caller can see; None: everything (platform roles)."""
    if policy.scope_filter(App, principal, Perm.CATALOG_VIEW) is None:
        return None
    tenant_ids, project_ids = set(), set()
    for grant in principal.grants:
        if Perm.CATALOG_VIEW not in grant.permissions or grant.tenant_id is None:
            continue
        (project_ids if grant.project_id else tenant_ids).add(grant.project_id or grant.tenant_id)
    return (
        Q(entitled_to_all=True)
        | Q(entitlements__tenant_id__in=tenant_ids)
        | Q(entitlements__project__isnull=True, entitlements__tenant__projects__id__in=project_ids)
        | Q(entitlements__project_id__in=project_ids)
    )


def visible_apps(principal: Principal) -> QuerySet[App]:
    """Only entitled apps with a published version are visible."""
    apps = App.objects.filter(versions__status=AppVersion.Status.PUBLISHED)
    condition = _entitlement_filter(principal)
    if condition is not None:
        if not principal.grants:
            return App.objects.none()
        apps = apps.filter(condition)
    return apps.distinct()


def is_entitled(app: App, project) -> bool:
    return (
        app.entitled_to_all
        or Entitlement.objects.filter(
            Q(project__isnull=True) | Q(project=project), app=app, tenant_id=project.tenant_id
        ).exists()
    )


def require_entitled(principal: Principal, app: App, project) -> None:
    if not is_entitled(app, project):
        audit.record(
            principal,
            "catalog.launch",
            target=project,
            outcome=audit.DENIED,
            details={"app": app.slug, "reason": "not entitled"},
        )
        raise Forbidden(f"The project is not entitled to {app.name}.")
