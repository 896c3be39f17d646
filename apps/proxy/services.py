"""The platform proxy's operations on behalf of a caller (the API, the pages and the
admin call these): a project's proxy scope and an operator's UI-mode override, both
checked by the policy and audited. Route mechanics are in ``routes``, tickets and
route cookies in ``sessions``."""

from __future__ import annotations

from apps.core import audit
from apps.core.errors import Forbidden, ValidationFailed
from apps.proxy import exposure
from apps.proxy.routes import SCOPES, allowed_scopes
from apps.tenancy import policy
from apps.tenancy.roles import Perm


def set_project_scope(principal, project, scope: str) -> None:
    """Where the project's routes are served, within what the tenant allows (seed 003)."""
    policy.require(principal, Perm.PROXY_MANAGE, project)
    if scope not in SCOPES:
        raise ValidationFailed("Unknown proxy scope.", details={"scope": [f"one of {', '.join(SCOPES)}"]})
    if scope not in allowed_scopes(project.tenant):
        audit.record(
            principal, "proxy.scope.change", target=project, outcome="denied", details={"scope": scope}
        )
        raise Forbidden(
            f"Proxy scope {scope!r} is not allowed for this tenant.",
            code="proxy_scope_denied",
            details={"allowed_scopes": allowed_scopes(project.tenant)},
        )
    project.policy = {**(project.policy or {}), "proxy.scope": scope}
    project.save(update_fields=["policy", "updated_at"])
    audit.record(principal, "proxy.scope.change", target=project, details={"scope": scope})


def set_ui_mode(principal, instance, override: str) -> None:
    """An operator's exposure override (seed 002: operator-controlled decisions are audited)."""
    if not principal.is_platform_admin:
        raise Forbidden("Only platform operators choose how an app's UI is exposed.")
    if override not in ("", exposure.NATIVE, exposure.EMBEDDED, exposure.LINK_OUT):
        raise ValidationFailed(details={"ui_mode_override": ["one of native, embedded, link_out, or blank"]})
    decision = exposure.decide(instance.app_version.manifest, override)
    previous = instance.ui_mode
    type(instance).objects.filter(pk=instance.pk).update(
        ui_mode_override=override, ui_mode=decision.mode, ui_mode_reason=decision.reason[:255]
    )
    instance.ui_mode_override, instance.ui_mode, instance.ui_mode_reason = (
        override,
        decision.mode,
        decision.reason,
    )
    for route in instance.proxy_routes.all():
        route.policy = {**route.policy, "embedded": decision.mode == exposure.EMBEDDED}
        route.save(update_fields=["policy", "updated_at"])
    audit.record(
        principal,
        "instance.ui_mode.change",
        target=instance,
        details={"override": override, "from": previous, "to": decision.mode, "reason": decision.reason},
    )
