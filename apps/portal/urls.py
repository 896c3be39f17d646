from django.contrib.auth import views as auth_views
from django.urls import include, path

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

# Pages of one allocation: projects/<pk>/allocations/<allocation_pk>/...
allocation_urls = [
    path("", allocations.allocation_detail, name="allocation_detail"),
    path("metrics/", allocations.allocation_metrics, name="allocation_metrics"),
    path("release/", allocations.allocation_release, name="allocation_release"),
    path("access/", access.allocation_access, name="allocation_access"),
    path("access/keys/<uuid:key_pk>/remove/", access.allocation_key_remove, name="allocation_key_remove"),
    path("terminal/", terminal.terminal, name="allocation_terminal"),
    path("terminal/sessions/", terminal.terminal_sessions, name="terminal_sessions"),
    path("terminal/sessions/<uuid:session_pk>/", terminal.terminal_replay, name="terminal_replay"),
    path(
        "terminal/sessions/<uuid:session_pk>/recording.cast",
        terminal.terminal_recording,
        name="terminal_recording",
    ),
]

# Pages of one app instance: projects/<pk>/instances/<instance_pk>/...
instance_urls = [
    path("", instances.instance_detail, name="instance_detail"),
    path("open/<slug:endpoint>/", instances.instance_open, name="instance_open"),
    path("share/", instances.instance_share, name="instance_share"),
    path("logs/download/", instances.instance_logs_download, name="instance_logs_download"),
    # Last: any other single word is an action (stop, start, delete).
    path("<slug:action>/", instances.instance_action, name="instance_action"),
]

# Pages of one project: projects/<pk>/...
project_urls = [
    path("", project_detail.project_detail, name="project_detail"),
    path("members/", project_detail.members, name="project_members"),
    path("members/<uuid:membership_pk>/remove/", project_detail.member_remove, name="member_remove"),
    path("service-accounts/", project_detail.service_accounts, name="project_service_accounts"),
    path(
        "service-accounts/<uuid:account_pk>/revoke/",
        project_detail.service_account_revoke,
        name="service_account_revoke",
    ),
    path("secrets/", custody.project_secrets, name="project_secrets"),
    path("secrets/<uuid:secret_pk>/remove/", custody.project_secret_remove, name="project_secret_remove"),
    path("access-credentials/", custody.access_credentials, name="access_credentials"),
    path(
        "access-credentials/<uuid:credential_pk>/remove/",
        custody.access_credential_remove,
        name="access_credential_remove",
    ),
    path("allocations/", allocations.allocation_list, name="allocation_list"),
    path("allocations/new/", allocations.allocation_create, name="allocation_create"),
    path("allocations/check/", allocations.allocation_check, name="allocation_check"),
    path("allocations/<uuid:allocation_pk>/", include(allocation_urls)),
    path("apps/<slug:slug>/launch/", apps.app_launch, name="app_launch"),
    path("instances/", instances.instance_list, name="instance_list"),
    path("instances/<uuid:instance_pk>/", include(instance_urls)),
]

# A tenant's usage and quota: tenants/<tenant_id>/...
tenant_urls = [
    path("usage/", usage.tenant_usage, name="tenant_usage"),
    path("usage/daily/", usage.tenant_usage_daily, name="tenant_usage_daily"),
    path("usage/spend/", usage.tenant_spend, name="tenant_spend"),
    path("usage/charges/", usage.tenant_charges_daily, name="tenant_charges_daily"),
    path("quota/", quotas.tenant_quota, name="tenant_quota"),
    path("quota/gauges/", quotas.tenant_quota_gauges, name="tenant_quota_gauges"),
]

urlpatterns = [
    path("", dashboard.dashboard, name="dashboard"),
    path("switch/", dashboard.switch_project, name="switch_project"),
    path("projects/", projects.project_list, name="project_list"),
    path("alerts/", alerts.alert_list, name="alert_list"),
    path("tenants/<str:tenant_id>/", include(tenant_urls)),
    path("projects/new/", projects.project_create, name="project_create"),
    path("projects/<uuid:pk>/", include(project_urls)),
    path("profile/", access.profile, name="profile"),
    path("profile/ssh-keys/<uuid:key_pk>/remove/", access.profile_key_remove, name="profile_key_remove"),
    path("apps/", apps.app_catalog, name="app_catalog"),
    path("apps/<slug:slug>/", apps.app_detail, name="app_detail"),
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
