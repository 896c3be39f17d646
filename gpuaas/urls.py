from typing import ClassVar

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from apps.access.api import urls as access_api
from apps.allocations.api import urls as allocations_api
from apps.catalog.api.views import CatalogAppDetailView, CatalogAppListView, CatalogVersionView
from apps.core import views as core_views
from apps.metering.api.views import BillingExportView, QuotaView, UsageView
from apps.monitoring.api import alerts as alerts_api
from apps.monitoring.api.views import GpuMetricsView
from apps.networking.api.views import VpcView
from apps.proxy.api.views import ProjectProxyView, UiSessionView
from apps.storage.api.views import TenantStorageView
from apps.tenancy.api import urls as tenancy_api
from apps.tenancy.api.views import JwksView
from apps.tenancy.auth import passwords


class SwaggerView(SpectacularSwaggerView):
    @extend_schema(exclude=True)
    def get(self, request, *args, **kwargs):
        response = super().get(request, *args, **kwargs)
        # Swagger UI boots from an inline script; the assets themselves are vendored.
        response.csp = (
            "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
            "img-src 'self' data:; frame-ancestors 'none'; object-src 'none'; base-uri 'self'"
        )
        return response


class AgentSchemaView(SpectacularAPIView):
    """Node agents' endpoints, apart from the public document (``/api/schema/``)."""

    custom_settings: ClassVar[dict] = {
        "TITLE": "GPUaaS node agent API",
        "DESCRIPTION": "What a node agent calls: enrollment with a one-time bootstrap token, then "
        "tasks, reports, heartbeats, telemetry and host access with its node credential.",
        "PREPROCESSING_HOOKS": ["apps.core.schema.only_agent_endpoints"],
        "POSTPROCESSING_HOOKS": [
            "drf_spectacular.hooks.postprocess_schema_enums",
            "apps.runtime.api.agent.document_fetch_tasks",
            "apps.core.schema.add_error_responses",
            "apps.core.schema.tag_agent_operations",
        ],
        "TAGS": [{"name": "agent", "description": "The node agent's calls."}],
    }


urlpatterns = [
    path("healthz", core_views.healthz, name="healthz"),
    path("readyz", core_views.readyz, name="readyz"),
    path("metrics", core_views.prometheus_metrics, name="metrics"),
    path(".well-known/jwks.json", JwksView.as_view(), name="jwks"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("api/agent/schema/", AgentSchemaView.as_view(), name="agent-schema"),
    path("api/v1/", include(tenancy_api.v1_urlpatterns)),
    path("api/v1/", include(allocations_api.v1_urlpatterns)),
    path("api/v1/", include("apps.runtime.api.urls")),
    path("api/v1/", include("apps.access.api.custody")),
    path("api/v1/", include(access_api.v1_urlpatterns)),
    path("api/v1/workloads/<uuid:iid>/ui/session", UiSessionView.as_view(), name="workload-ui-session"),
    path("api/v1/projects/<uuid:project_pk>/proxy", ProjectProxyView.as_view(), name="project-proxy"),
    path("api/v1/catalog/apps", CatalogAppListView.as_view(), name="catalog-apps"),
    path("api/v1/catalog/apps/<slug:slug>", CatalogAppDetailView.as_view(), name="catalog-app"),
    path(
        "api/v1/catalog/apps/<slug:slug>/versions/<str:version>",
        CatalogVersionView.as_view(),
        name="catalog-version",
    ),
    path("api/agent/v1/", include("apps.runtime.api.agent_urls")),
    path("api/agent/v1/", include(access_api.agent_urlpatterns)),
    path("api/", include(tenancy_api.ccp_urlpatterns)),
    path("api/", include(allocations_api.ccp_urlpatterns)),
    path("api/network-manager/vpc", VpcView.as_view(), name="network-vpc"),
    path("api/storage/tenant", TenantStorageView.as_view(), name="storage-tenant"),
    path("api/metering/quota/<str:tenant_id>", QuotaView.as_view(), name="metering-quota"),
    path("api/metering/usage", UsageView.as_view(), name="metering-usage"),
    path("api/metering/export/csv", BillingExportView.as_view(), name="metering-export"),
    path("api/metrics/gpu/<str:tenant_id>", GpuMetricsView.as_view(), name="metrics-gpu"),
    path("api/alerts", alerts_api.AlertListView.as_view(), name="alerts"),
    path("api/alerts/subscribe", alerts_api.SubscribeView.as_view(), name="alerts-subscribe"),
    path("api/alerts/subscriptions", alerts_api.SubscriptionListView.as_view(), name="alert-subscriptions"),
    path(
        "api/alerts/subscriptions/<uuid:subscription_id>",
        alerts_api.SubscriptionDetailView.as_view(),
        name="alert-subscription",
    ),
    path(
        "api/alerts/subscriptions/<uuid:subscription_id>/test",
        alerts_api.SubscriptionTestView.as_view(),
        name="alert-subscription-test",
    ),
    # Before the admin's own URLs: its login form (AdminSignInForm) is throttled, and a
    # refused attempt answers 429.
    path("admin/login/", passwords.answers_429_while_limited(admin.site.login)),
    path("admin/", admin.site.urls),
    path("oidc/", include("apps.tenancy.auth.oidc_urls")),
    path("", include("apps.portal.urls")),
]

handler400 = "apps.core.error_pages.bad_request"
handler403 = "apps.core.error_pages.permission_denied"
handler404 = "apps.core.error_pages.page_not_found"
handler500 = "apps.core.error_pages.server_error"
