"""The control plane: route selection and lifecycle, exposure, UI sessions, idle culling."""

from datetime import datetime, timedelta
from importlib import import_module

import pytest
from django.apps import apps as django_apps
from django.utils import timezone

from apps.core.models import AuditEvent
from apps.proxy import idle, routes, services, sessions
from apps.proxy.models import ProxyPool, ProxyRoute
from apps.runtime import services as runtime
from apps.runtime.models import AppInstance
from apps.tenancy import principal as principals
from apps.tenancy.models import Membership
from tests.factories import UserFactory
from tests.support.catalog import publish
from tests.support.members import member
from tests.support.proxy import login_session, mint_ticket, proxied_manifest, start_instance

pytestmark = pytest.mark.django_db


@pytest.fixture
def webapp(db):
    return publish("webapp", proxied_manifest())


def launch_api(api, project, allocation, app="webapp"):
    payload = {"app": app, "allocation_id": str(allocation.pk)}
    return api.post(f"/api/v1/projects/{project.pk}/app-instances", payload, format="json")


def test_route_is_planned_at_launch_active_while_running_and_removed_on_stop(
    owner, project, active_allocation, webapp
):
    instance = start_instance(owner, project, active_allocation, webapp, host="127.0.0.1", port=41000)
    route = ProxyRoute.objects.get(instance=instance)
    assert (route.status, route.upstream_host, route.upstream_port) == ("active", "127.0.0.1", 41000)
    assert route.public_url == f"http://127.0.0.1:8000/w/{instance.pk}/web/"
    assert route.mode == "path_prefix"
    assert route.pool.name == "shared"
    runtime.change(principals.for_user(owner), instance, "stop")
    route.refresh_from_db()
    assert (route.status, route.upstream_host, route.upstream_port) == ("removed", "", None)


def test_subdomain_routes_when_an_apps_domain_is_set(settings, owner, project, active_allocation, webapp):
    settings.APPS_DOMAIN = "apps.example.test"
    instance = start_instance(owner, project, active_allocation, webapp, host="127.0.0.1", port=41000)
    route = ProxyRoute.objects.get(instance=instance)
    assert route.mode == "subdomain"
    assert route.public_url == f"http://{route.slug}.apps.example.test:8000/"
    # JupyterLab serves under the platform base path on its own origin too.
    assert sessions.entry_url(route) == f"http://{route.slug}.apps.example.test:8000/w/{instance.pk}/web/lab"


def test_a_scope_the_tenant_may_not_use_denies_the_launch(api, owner, project, active_allocation, webapp):
    project.policy = {"proxy.scope": "project"}
    project.save()
    api.force_login(owner)
    response = launch_api(api, project, active_allocation)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "proxy_scope_denied"
    assert not AppInstance.objects.exists()


def test_project_scope_changes_within_the_tenant_policy_and_gets_its_own_pool(
    api, owner, project, active_allocation, webapp
):
    api.force_login(owner)
    denied = api.put(f"/api/v1/projects/{project.pk}/proxy", {"scope": "project"}, format="json")
    assert denied.status_code == 403
    assert denied.json()["error"]["details"]["allowed_scopes"] == ["shared"]
    project.tenant.policy = {"proxy.allowed_scopes": ["shared", "project"], "proxy.max_project_pools": 1}
    project.tenant.save()
    allowed = api.put(f"/api/v1/projects/{project.pk}/proxy", {"scope": "project"}, format="json")
    assert allowed.status_code == 200
    assert allowed.json()["scope"] == "project"
    assert list(
        AuditEvent.objects.filter(action="proxy.scope.change")
        .values_list("outcome", flat=True)
        .order_by("id")
    ) == ["denied", "success"]

    response = launch_api(api, project, active_allocation)
    assert response.status_code == 202, response.content
    route = ProxyRoute.objects.get()
    assert (route.pool.scope, route.pool.project) == ("project", project)


def test_limits_and_idle_timeout_are_the_lowest_of_manifest_tenant_and_platform(
    settings, owner, project, active_allocation
):
    settings.PROXY_MAX_CONNECTIONS_PER_USER = 10
    project.tenant.policy = {"proxy.max_connections_per_instance": 50, "proxy.max_idle_timeout_seconds": 600}
    project.tenant.save()
    app = publish("limited", proxied_manifest(limits={"per_instance": 80, "per_user": 20}))
    instance = start_instance(owner, project, active_allocation, app, host="127.0.0.1", port=41000)
    route = ProxyRoute.objects.get(instance=instance)
    assert route.policy["limits"] == {"per_instance": 50, "per_user": 10}
    # JupyterLab's idle_minutes parameter (60 by default) is capped at the tenant's 10 minutes.
    assert route.policy["idle_timeout_seconds"] == 600


def test_ui_session_on_a_path_route_sets_the_route_cookie(api, owner, project, active_allocation, webapp):
    instance = start_instance(owner, project, active_allocation, webapp, host="127.0.0.1", port=41000)
    assert instance.proxy_routes.get().public_url.startswith("http://127.0.0.1:8000/w/")
    api.force_login(owner)
    # Asked on the portal's other name: the cookie is set there, and the app opens there.
    response = api.post(
        f"/api/v1/workloads/{instance.pk}/ui/session", {}, format="json", HTTP_HOST="localhost:8000"
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["open_url"] == f"http://localhost:8000/w/{instance.pk}/web/lab"
    assert (body["mode"], body["route_mode"], body["ticket"]) == ("embedded", "path_prefix", None)
    cookie = response.cookies[sessions.COOKIE]
    assert cookie["path"] == f"/w/{instance.pk}/web/"
    assert cookie["httponly"]
    assert cookie["samesite"] == "Lax"
    # The cookie lives as long as the portal session it hangs on; the answer says until when.
    expires = datetime.fromisoformat(body["expires_at"].replace("Z", "+00:00"))
    assert expires - timezone.now() > timedelta(hours=1)
    assert int(cookie["max-age"]) > 3600
    assert AuditEvent.objects.filter(action="proxy.session.issue", target_id=str(instance.pk)).exists()


def test_ui_session_on_a_subdomain_route_gives_a_single_use_ticket_for_that_origin(
    settings, api, owner, project, active_allocation, webapp
):
    settings.APPS_DOMAIN = "apps.example.test"
    instance = start_instance(owner, project, active_allocation, webapp, host="127.0.0.1", port=41000)
    route = ProxyRoute.objects.get(instance=instance)
    api.force_login(owner)
    body = api.post(f"/api/v1/workloads/{instance.pk}/ui/session", {}, format="json").json()
    assert sessions.COOKIE not in api.cookies or not api.cookies[sessions.COOKIE].value
    assert body["exchange_url"] == f"http://{route.slug}.apps.example.test:8000/_gpuaas/session"
    with pytest.raises(sessions.Unauthenticated):
        sessions.exchange(body["ticket"], "127.0.0.1:8000")  # another origin: refused, and spent
    fresh = api.post(f"/api/v1/workloads/{instance.pk}/ui/session", {}, format="json").json()
    exchanged = sessions.exchange(fresh["ticket"], f"{route.slug}.apps.example.test:8000")
    assert exchanged.cookie_path == "/"
    assert sessions.read_cookie(exchanged.cookie)["r"] == str(route.pk)
    with pytest.raises(sessions.Unauthenticated):
        sessions.exchange(fresh["ticket"], f"{route.slug}.apps.example.test:8000")


def test_ui_session_is_for_people_in_scope(
    api, owner, project, other_tenant_project, active_allocation, webapp
):
    instance = start_instance(owner, project, active_allocation, webapp, host="127.0.0.1", port=41000)
    stranger = member("project_admin", project=other_tenant_project)
    api.force_login(stranger)
    assert api.post(f"/api/v1/workloads/{instance.pk}/ui/session", {}, format="json").status_code == 404
    with pytest.raises(sessions.Forbidden):
        sessions.mint(
            principals.Principal(kind="service_account", key="sa:1", name="sa:x"), instance, "web", None
        )


def test_logout_revocation_and_stop_change_the_cached_decision(owner, project, active_allocation, webapp):
    instance = start_instance(owner, project, active_allocation, webapp, host="127.0.0.1", port=41000)
    route = ProxyRoute.objects.get(instance=instance)
    session = login_session(owner)
    ticket = mint_ticket(owner, instance, session)["ticket"]
    payload = sessions.read_cookie(sessions.exchange(ticket, route.host).cookie)

    def decision():
        cached, generations = sessions.cached_decision(str(route.pk), str(instance.pk), payload)
        return cached or sessions.decide(str(route.pk), str(instance.pk), payload, generations)

    assert decision().allowed
    assert sessions.cached_decision(str(route.pk), str(instance.pk), payload)[0].allowed  # reused
    owner.memberships.all().delete()  # revoked: the membership signal bumps the user's generation
    assert decision().status in (403, 404)
    assert not decision().allowed
    sessions.end_platform_session(session.session_key, owner.pk)
    assert decision().status == 401


def test_operator_override_changes_the_exposure_and_is_audited(
    owner, platform_admin, project, active_allocation, webapp
):
    instance = start_instance(owner, project, active_allocation, webapp, host="127.0.0.1", port=41000)
    assert instance.ui_mode == "embedded"
    services.set_ui_mode(principals.for_user(platform_admin), instance, "link_out")
    instance.refresh_from_db()
    assert (instance.ui_mode, instance.ui_mode_reason) == (
        "link_out",
        "an operator chose to open it in its own tab",
    )
    assert ProxyRoute.objects.get(instance=instance).policy["embedded"] is False
    event = AuditEvent.objects.get(action="instance.ui_mode.change")
    assert event.details["from"] == "embedded"
    assert event.details["to"] == "link_out"
    with pytest.raises(sessions.Forbidden):
        services.set_ui_mode(principals.for_user(owner), instance, "embedded")


def test_idle_instances_are_stopped_with_an_event_saying_why(owner, project, active_allocation, webapp):
    idle_one = start_instance(owner, project, active_allocation, webapp, host="127.0.0.1", port=41000)
    busy = start_instance(owner, project, active_allocation, webapp, host="127.0.0.1", port=41001)
    timeout = ProxyRoute.objects.get(instance=idle_one).policy["idle_timeout_seconds"]
    later = timezone.now() + timedelta(seconds=timeout + 5)
    routes.touch(ProxyRoute.objects.get(instance=busy).pk, when=later - timedelta(seconds=30))

    assert idle.cull_idle(now=later) == [idle_one.pk]
    idle_one.refresh_from_db()
    busy.refresh_from_db()
    assert idle_one.state == "stopping"
    assert busy.state == "running"
    assert idle_one.events.first().message == "stopped after 1 hour without use through the platform proxy"


def test_reconcile_brings_stale_routes_back_in_line(owner, project, active_allocation, webapp):
    instance = start_instance(owner, project, active_allocation, webapp, host="127.0.0.1", port=41000)
    AppInstance.objects.filter(pk=instance.pk).update(state="failed")  # a transition that skipped the route
    assert routes.reconcile() == 1
    assert ProxyRoute.objects.get(instance=instance).status == "removed"
    assert routes.reconcile() == 0


def test_the_shared_pool_is_made_by_its_migration():
    # Asked of the migration itself: a transactional test's flush empties the table, so
    # whether the row is still there depends on the tests that ran before.
    ProxyPool.objects.filter(name="shared").delete()
    import_module("apps.proxy.migrations.0002_shared_pool").create_shared_pool(django_apps, None)
    assert ProxyPool.objects.filter(name="shared", scope="shared", status="active").exists()


@pytest.mark.parametrize(
    ("issuer", "apps_domain", "mode"),
    [
        ("https://portal.example.com", "apps.example.com", "embedded"),
        ("http://localhost:8000", "apps.localhost", "link_out"),  # every *.localhost name is its own site
        ("http://127.0.0.1:8000", "apps.example.com", "link_out"),
    ],
)
def test_embedding_on_subdomains_needs_the_apps_domain_on_the_portals_site(
    settings, issuer, apps_domain, mode
):
    from apps.proxy import exposure

    settings.ISSUER, settings.APPS_DOMAIN = issuer, apps_domain
    decision = exposure.decide(proxied_manifest())
    assert (decision.mode, decision.route_mode) == (mode, "subdomain")
    if mode == "link_out":
        assert decision.reason.startswith("the apps domain is another site than the portal's")


def test_operators_force_stop_and_choose_the_ui_mode_from_the_admin(
    client, owner, platform_admin, project, active_allocation, webapp
):
    from django.urls import reverse

    instance = start_instance(owner, project, active_allocation, webapp, host="127.0.0.1", port=41000)
    client.force_login(platform_admin)
    changelist = reverse("admin:runtime_appinstance_changelist")

    def act(action):
        selected = {"action": action, "_selected_action": [str(instance.pk)]}
        return client.post(changelist, selected, follow=True)

    assert "Set to open in its own tab" in act("ui_link_out").content.decode()
    instance.refresh_from_db()
    assert (instance.ui_mode, instance.ui_mode_override) == ("link_out", "link_out")
    act("ui_platform_decides")
    instance.refresh_from_db()
    assert (instance.ui_mode, instance.ui_mode_override) == ("embedded", "")
    assert AuditEvent.objects.filter(action="instance.ui_mode.change").count() == 2
    assert "Stopping" in act("force_stop").content.decode()
    instance.refresh_from_db()
    assert instance.state == "stopping"


def test_a_platform_operator_opens_a_tenants_app_only_as_a_member(
    api, owner, project, active_allocation, webapp
):
    """An app's pages run with the session of whoever opens it: an operator's reaches every
    tenant, so operators manage apps from the admin and open them only where they belong."""
    instance = start_instance(owner, project, active_allocation, webapp, host="127.0.0.1", port=41000)
    operator = UserFactory(is_superuser=True, is_staff=True)
    api.force_login(operator)
    refused = api.post(f"/api/v1/workloads/{instance.pk}/ui/session", {}, format="json")
    assert refused.status_code == 403
    assert "only as members" in refused.json()["error"]["message"]
    assert AuditEvent.objects.filter(
        action="proxy.session.issue", outcome="denied", target_id=str(instance.pk)
    ).exists()
    # A route cookie the operator got hold of is refused by the data planes' decision too.
    payload = {"u": operator.pk, "s": "", "r": "route"}  # no portal session to check here
    route = ProxyRoute.objects.get(instance=instance)
    assert not sessions.decide(str(route.pk), str(instance.pk), payload, ()).allowed

    Membership.objects.create(user=operator, tenant=project.tenant, project=project, role="project_admin")
    assert api.post(f"/api/v1/workloads/{instance.pk}/ui/session", {}, format="json").status_code == 201
    assert sessions.decide(str(route.pk), str(instance.pk), payload, ()).allowed


@pytest.mark.parametrize("body", ["[1, 2]", '"web"', "null"])
def test_a_ui_session_body_that_is_not_an_object_is_a_400(
    api, owner, project, active_allocation, webapp, body
):
    instance = start_instance(owner, project, active_allocation, webapp, host="127.0.0.1", port=41000)
    api.force_login(owner)
    response = api.post(f"/api/v1/workloads/{instance.pk}/ui/session", body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "validation_error"
