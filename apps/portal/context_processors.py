from __future__ import annotations

from functools import cached_property

from django.conf import settings

from apps.tenancy.roles import Perm

SESSION_PROJECT = "portal.current_project"


def remember_project(request, project) -> None:
    """Opening a project's pages makes it the switcher's current project."""
    if request.session.get(SESSION_PROJECT) != str(project.pk):
        request.session[SESSION_PROJECT] = str(project.pk)


SWITCHER_LIMIT = 100


class Navigation:
    """The layout's navigation, computed only if a template reads it (the admin never does)."""

    def __init__(self, request):
        self.request = request

    @cached_property
    def principal(self):
        from apps.portal.views.base import principal_of

        return principal_of(self.request)

    @cached_property
    def can_see_alerts(self) -> bool:
        from apps.portal.views.base import may

        return may(self.principal, Perm.ALERT_VIEW)

    @cached_property
    def can_audit(self) -> bool:
        from apps.portal.views.base import may

        return may(self.principal, Perm.AUDIT_VIEW)

    @cached_property
    def can_use_apps(self) -> bool:
        from apps.portal.views.base import may

        return may(self.principal, Perm.CATALOG_VIEW)

    @cached_property
    def allocations_project(self):
        """The current project, when the caller may see its allocations (the nav's link)."""
        project = self.current_project
        if project is not None and self.principal.can(Perm.ALLOCATION_VIEW, project.tenant_id, project.pk):
            return project
        return None

    @cached_property
    def projects(self) -> list:
        """The switcher's choices: projects the caller may see, at most ``SWITCHER_LIMIT``."""
        from apps.portal.queries import visible_projects

        return list(
            visible_projects(self.principal).order_by("tenant__name", "name", "pk")[: SWITCHER_LIMIT + 1]
        )

    @property
    def projects_truncated(self) -> bool:
        return len(self.projects) > SWITCHER_LIMIT

    @cached_property
    def tenant_groups(self) -> list[tuple]:
        groups: dict = {}
        for project in self.projects[:SWITCHER_LIMIT]:
            groups.setdefault(project.tenant, []).append(project)
        return list(groups.items())

    @cached_property
    def current_project(self):
        from apps.portal.queries import visible_projects

        current = self.request.session.get(SESSION_PROJECT)
        if not current:
            return None
        found = next((p for p in self.projects if str(p.pk) == current), None)
        if found is None and self.projects_truncated:
            found = visible_projects(self.principal).filter(pk=current).first()
        return found


def portal(request):
    context = {"oidc_enabled": settings.OIDC_ENABLED, "embedded_mode": settings.EMBEDDED}
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        context["nav"] = Navigation(request)
        operator = user.is_superuser or user.is_staff
        context["path_routes_warning"] = settings.PATH_ROUTES_RISK_ACCEPTED and operator
    return context
