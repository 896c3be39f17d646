from django.contrib.auth import views as auth_views
from django.urls import path

from apps.portal.views import (
    access,
    alerts,
    allocations,
    apps,
    audit,
    custody,
    dashboard,
    instances,
    project_detail,
    projects,
    quotas,
    terminal,
    usage,
)
from apps.tenancy.auth import passwords

urlpatterns = [
    path("", dashboard.dashboard, name="dashboard"),
    path("switch/", dashboard.switch_project, name="switch_project"),
    path("projects/", projects.project_list, name="project_list"),
    path("alerts/", alerts.alert_list, name="alert_list"),
    path("tenants/<str:tenant_id>/usage/", usage.tenant_usage, name="tenant_usage"),
    path("tenants/<str:tenant_id>/usage/daily/", usage.tenant_usage_daily, name="tenant_usage_daily"),
    path("tenants/<str:tenant_id>/usage/spend/", usage.tenant_spend, name="tenant_spend"),
    path("tenants/<str:tenant_id>/usage/charges/", usage.tenant_charges_daily, name="tenant_charges_daily"),
    path("tenants/<str:tenant_id>/quota/", quotas.tenant_quota, name="tenant_quota"),
    path("tenants/<str:tenant_id>/quota/gauges/", quotas.tenant_quota_gauges, name="tenant_quota_gauges"),
    path("projects/new/", projects.project_create, name="project_create"),
    path("projects/<uuid:pk>/", project_detail.project_detail, name="project_detail"),
    path("projects/<uuid:pk>/members/", project_detail.members, name="project_members"),
    path(
        "projects/<uuid:pk>/members/<uuid:membership_pk>/remove/",
        project_detail.member_remove,
        name="member_remove",
    ),
    path(
        "projects/<uuid:pk>/service-accounts/",
        project_detail.service_accounts,
        name="project_service_accounts",
    ),
    path(
        "projects/<uuid:pk>/service-accounts/<uuid:account_pk>/revoke/",
        project_detail.service_account_revoke,
        name="service_account_revoke",
    ),
    path("projects/<uuid:pk>/secrets/", custody.project_secrets, name="project_secrets"),
    path(
        "projects/<uuid:pk>/secrets/<uuid:secret_pk>/remove/",
        custody.project_secret_remove,
        name="project_secret_remove",
    ),
    path("projects/<uuid:pk>/access-credentials/", custody.access_credentials, name="access_credentials"),
    path(
        "projects/<uuid:pk>/access-credentials/<uuid:credential_pk>/remove/",
        custody.access_credential_remove,
        name="access_credential_remove",
    ),
    path("projects/<uuid:pk>/allocations/", allocations.allocation_list, name="allocation_list"),
    path("projects/<uuid:pk>/allocations/new/", allocations.allocation_create, name="allocation_create"),
    path("projects/<uuid:pk>/allocations/check/", allocations.allocation_check, name="allocation_check"),
    path(
        "projects/<uuid:pk>/allocations/<uuid:allocation_pk>/",
        allocations.allocation_detail,
        name="allocation_detail",
    ),
    path(
        "projects/<uuid:pk>/allocations/<uuid:allocation_pk>/metrics/",
        allocations.allocation_metrics,
        name="allocation_metrics",
    ),
    path(
        "projects/<uuid:pk>/allocations/<uuid:allocation_pk>/release/",
        allocations.allocation_release,
        name="allocation_release",
    ),
    path(
        "projects/<uuid:pk>/allocations/<uuid:allocation_pk>/access/",
        access.allocation_access,
        name="allocation_access",
    ),
    path(
        "projects/<uuid:pk>/allocations/<uuid:allocation_pk>/access/keys/<uuid:key_pk>/remove/",
        access.allocation_key_remove,
        name="allocation_key_remove",
    ),
    path("profile/", access.profile, name="profile"),
    path("profile/ssh-keys/<uuid:key_pk>/remove/", access.profile_key_remove, name="profile_key_remove"),
    path(
        "projects/<uuid:pk>/allocations/<uuid:allocation_pk>/terminal/",
        terminal.terminal,
        name="allocation_terminal",
    ),
    path(
        "projects/<uuid:pk>/allocations/<uuid:allocation_pk>/terminal/sessions/",
        terminal.terminal_sessions,
        name="terminal_sessions",
    ),
    path(
        "projects/<uuid:pk>/allocations/<uuid:allocation_pk>/terminal/sessions/<uuid:session_pk>/",
        terminal.terminal_replay,
        name="terminal_replay",
    ),
    path(
        "projects/<uuid:pk>/allocations/<uuid:allocation_pk>/terminal/sessions/<uuid:session_pk>/recording.cast",
        terminal.terminal_recording,
        name="terminal_recording",
    ),
    path("apps/", apps.app_catalog, name="app_catalog"),
    path("apps/<slug:slug>/", apps.app_detail, name="app_detail"),
    path("projects/<uuid:pk>/apps/<slug:slug>/launch/", apps.app_launch, name="app_launch"),
    path("projects/<uuid:pk>/instances/", instances.instance_list, name="instance_list"),
    path(
        "projects/<uuid:pk>/instances/<uuid:instance_pk>/",
        instances.instance_detail,
        name="instance_detail",
    ),
    path(
        "projects/<uuid:pk>/instances/<uuid:instance_pk>/open/<slug:endpoint>/",
        instances.instance_open,
        name="instance_open",
    ),
    path(
        "projects/<uuid:pk>/instances/<uuid:instance_pk>/share/",
        instances.instance_share,
        name="instance_share",
    ),
    path(
        "projects/<uuid:pk>/instances/<uuid:instance_pk>/logs/download/",
        instances.instance_logs_download,
        name="instance_logs_download",
    ),
    path(
        "projects/<uuid:pk>/instances/<uuid:instance_pk>/<slug:action>/",
        instances.instance_action,
        name="instance_action",
    ),
    path("audit/", audit.audit_log, name="audit_log"),
    path(
        "accounts/login/",
        passwords.answers_429_while_limited(
            auth_views.LoginView.as_view(
                authentication_form=passwords.SignInForm, redirect_authenticated_user=True
            )
        ),
        name="login",
    ),
    path("accounts/logout/", passwords.SignOutView.as_view(), name="logout"),
]
