from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from apps.core import views as core_views
from apps.tenancy.api import urls as tenancy_api
from apps.tenancy.api.views import JwksView


class SwaggerView(SpectacularSwaggerView):
    def get(self, request, *args, **kwargs):
        response = super().get(request, *args, **kwargs)
        # Swagger UI boots from an inline script; the assets themselves are vendored.
        response.csp = (
            "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
            "img-src 'self' data:; frame-ancestors 'none'; object-src 'none'; base-uri 'self'"
        )
        return response


urlpatterns = [
    path("healthz", core_views.healthz, name="healthz"),
    path("readyz", core_views.readyz, name="readyz"),
    path("metrics", core_views.prometheus_metrics, name="metrics"),
    path(".well-known/jwks.json", JwksView.as_view(), name="jwks"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("api/v1/", include(tenancy_api.v1_urlpatterns)),
    path("api/", include(tenancy_api.ccp_urlpatterns)),
    path("admin/", admin.site.urls),
    path("oidc/", include("apps.tenancy.auth.oidc_urls")),
    path("", include("apps.portal.urls")),
]
