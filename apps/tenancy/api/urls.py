from django.urls import path

from apps.tenancy.api import views

ccp_urlpatterns = [
    path("tenants", views.CcpTenantListView.as_view(), name="ccp-tenants"),
    path("tenants/<str:tenant_id>", views.CcpTenantDetailView.as_view(), name="ccp-tenant"),
    path(
        "tenants/<str:tenant_id>/projects", views.CcpTenantProjectsView.as_view(), name="ccp-tenant-projects"
    ),
]

v1_urlpatterns = [
    path("auth/token", views.TokenView.as_view(), name="auth-token"),
    path("tenants/<uuid:pk>", views.TenantDetailView.as_view(), name="tenant-detail"),
    path("projects", views.ProjectListView.as_view(), name="project-list"),
    path("projects/<uuid:pk>", views.ProjectDetailView.as_view(), name="project-detail"),
    path("projects/<uuid:project_pk>/members", views.MemberListView.as_view(), name="member-list"),
    path(
        "projects/<uuid:project_pk>/members/<uuid:pk>", views.MemberDetailView.as_view(), name="member-detail"
    ),
    path(
        "projects/<uuid:project_pk>/service-accounts",
        views.ServiceAccountListView.as_view(),
        name="service-account-list",
    ),
    path(
        "projects/<uuid:project_pk>/service-accounts/<uuid:pk>",
        views.ServiceAccountDetailView.as_view(),
        name="service-account-detail",
    ),
    path("audit", views.AuditListView.as_view(), name="audit-list"),
]
