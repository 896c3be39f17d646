"""``POST /api/v1/workloads/{iid}/ui/session`` and the project's proxy scope."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response

from apps.core.errors import NotFound
from apps.proxy import routes, services, sessions
from apps.proxy.api.serializers import UiSessionRequestSerializer
from apps.runtime.selectors import visible_instances
from apps.tenancy.api.base import BaseAPIView, validated
from apps.tenancy.api.views import ProjectScopedMixin
from apps.tenancy.roles import Perm

UiSessionResponse = inline_serializer(
    "UiSession",
    {
        "open_url": serializers.URLField(),
        "expires_at": serializers.DateTimeField(),
        "mode": serializers.ChoiceField(["native", "embedded", "link_out"]),
        "route_mode": serializers.ChoiceField(["subdomain", "path_prefix"]),
        "exchange_url": serializers.URLField(allow_null=True),
        "ticket": serializers.CharField(allow_null=True),
    },
)


class UiSessionView(BaseAPIView):
    @extend_schema(
        request=UiSessionRequestSerializer,
        responses={201: UiSessionResponse},
        summary="A browser session on one of the workload's app routes",
        description=(
            "On a path_prefix route the answer sets the route cookie itself and open_url can be opened "
            "at once. On a subdomain route the browser must first POST the single-use ticket "
            "(form field `ticket`) to exchange_url within 60 seconds; that sets the cookie on the "
            "route's origin and redirects to open_url."
        ),
    )
    def post(self, request, iid):
        instance = visible_instances(self.principal).filter(pk=iid).select_related("tenant").first()
        if instance is None:
            raise NotFound()
        data = validated(UiSessionRequestSerializer, request.data)
        endpoint = data.get("endpoint") or _first_proxied(instance)
        sessions.require_member(self.principal, instance, endpoint)
        minted = sessions.mint(self.principal, instance, endpoint, getattr(request, "session", None))
        body = {
            "open_url": minted["open_url"],
            "expires_at": minted["expires_at"],
            "mode": minted["mode"],
            "route_mode": minted["route_mode"],
            "exchange_url": minted["exchange_url"],
            "ticket": minted["ticket"],
        }
        response = Response(body, status=201)
        if minted["route_mode"] == "path_prefix":
            # Same origin as the portal: redeem the ticket now and set the route cookie here.
            exchanged = sessions.exchange(minted["ticket"], minted["route"].host)
            body["exchange_url"] = body["ticket"] = None
            # The cookie is the host's the browser asked on (127.0.0.1 or localhost on the
            # embedded default), so the app opens there.
            entry = urlsplit(minted["open_url"])
            body["open_url"] = request.build_absolute_uri(urlunsplit(("", "", entry.path, entry.query, "")))
            body["expires_at"] = timezone.now() + timedelta(seconds=exchanged.max_age)
            response.set_cookie(
                sessions.COOKIE,
                exchanged.cookie,
                max_age=exchanged.max_age,
                path=exchanged.cookie_path,
                httponly=True,
                samesite="Lax",
                secure=settings.SESSION_COOKIE_SECURE,
            )
        return response


def _first_proxied(instance) -> str:
    route = routes.first_route(instance)
    if route is None:
        raise NotFound("This app has no UI behind the platform proxy.")
    return route.endpoint_name


ProxyScopeState = inline_serializer(
    "ProxyScopeState",
    {
        "scope": serializers.CharField(),
        "allowed_scopes": serializers.ListField(child=serializers.CharField()),
    },
)


class ProjectProxyView(ProjectScopedMixin, BaseAPIView):
    @extend_schema(
        request=inline_serializer("ProxyScope", {"scope": serializers.CharField()}),
        responses={200: ProxyScopeState},
        summary="Set the proxy scope of the project's new app routes, within the tenant's policy",
    )
    def put(self, request, project_pk):
        project = self.project(Perm.PROJECT_VIEW)
        services.set_project_scope(self.principal, project, request.data.get("scope"))
        return self.get(request, project_pk)

    @extend_schema(
        responses={200: ProxyScopeState},
        summary="The proxy scope of the project's new app routes and the scopes the tenant allows",
    )
    def get(self, request, project_pk):
        project = self.project(Perm.PROJECT_VIEW)
        return Response(
            {"scope": routes.desired_scope(project), "allowed_scopes": routes.allowed_scopes(project.tenant)}
        )
