"""The app pages: the catalog, an app's page, the launch form built from the
manifest, the instances list and detail, stop / start / delete behind a
confirmation, and sharing. The node agent's part is simulated through the
services its API calls (``claim_tasks``, ``report_task``)."""

from __future__ import annotations

import copy
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from apps.access import services as host_access
from apps.allocations.models import Allocation, Node
from apps.catalog import services as catalog
from apps.catalog.models import Entitlement
from apps.core.models import AuditEvent
from apps.proxy import services as proxy_services
from apps.runtime import agents, selectors, services
from apps.runtime.models import AgentTask, AppInstance
from apps.tenancy import principal as principals
from tests.factories import shipped_manifest
from tests.support.catalog import publish
from tests.support.fleet import allocation_on
from tests.support.instances import agent_finishes, launched
from tests.support.members import member
from tests.support.pages import HTMX
from tests.support.world import MATRIX_KEYS

pytestmark = pytest.mark.django_db

# session, user, grants, project, state counts, count, page, switcher, the rows' Open routes
INSTANCE_LIST_BUDGET = 9


def every_type_manifest() -> dict:
    """Netdata with one parameter of each type and a private TCP endpoint."""
    manifest = copy.deepcopy(shipped_manifest("netdata"))
    manifest["parameters"] = [
        {
            "name": "history_hours",
            "label": "History kept (hours)",
            "type": "integer",
            "default": 24,
            "minimum": 1,
            "maximum": 168,
            "help": "How far back the charts go.",
        },
        {
            "name": "ratio",
            "label": "Sampling ratio",
            "type": "number",
            "default": 0.5,
            "minimum": 0.1,
            "maximum": 1,
        },
        {
            "name": "tag",
            "label": "Tag",
            "type": "string",
            "required": True,
            "pattern": "^[a-z]+$",
            "max_length": 12,
        },
        {"name": "verbose", "label": "Verbose logs", "type": "boolean", "default": False},
        {
            "name": "colour",
            "label": "Theme",
            "type": "choice",
            "default": "dark",
            "choices": ["light", "dark"],
        },
    ]
    manifest["endpoints"].append(
        {"name": "shell", "protocol": "tcp", "container_port": 2222, "exposure_modes": ["private"]}
    )
    return manifest


@pytest.fixture
def vllm(db):
    return publish("vllm-openai", name="vLLM OpenAI server")


def launch_url(project, slug="jupyterlab"):
    return reverse("app_launch", args=[project.pk, slug])


def detail_url(instance):
    return reverse("instance_detail", args=[instance.project_id, instance.pk])


def action_url(instance, action):
    return reverse("instance_action", args=[instance.project_id, instance.pk, action])


def field_html(body: str, name: str) -> str:
    """The ``<div class="field ...">`` of the parameter ``name`` (its control, help and errors)."""
    match = re.search(rf'<div class="field[^"]*" data-parameter="{name}">(.*?)</div>', body, re.S)
    assert match, f"no field for {name}"
    return match.group(1)


# --- catalog and app page ---------------------------------------------------------


def test_catalog_shows_only_entitled_apps(as_user, admin, project, other_tenant_project, jupyterlab, vllm):
    netdata = publish("netdata", entitled_to_all=False, name="Netdata")
    secret_app = publish("secret-app", shipped_manifest("netdata"), entitled_to_all=False, name="Globex only")
    catalog.entitle(None, secret_app, other_tenant_project.tenant)
    client = as_user(admin)
    body = client.get(reverse("app_catalog")).content.decode()
    assert 'data-app="jupyterlab"' in body
    assert 'data-app="vllm-openai"' in body
    assert 'data-app="netdata"' not in body
    assert "Globex only" not in body
    assert "JupyterLab notebooks on your GPU node" in body
    assert "GPUaaS platform" in body
    assert "1.0.0" in body
    assert "1 GPU" in body
    assert "1&ndash;8 GPUs" in body
    assert client.get(reverse("app_detail", args=["netdata"])).status_code == 404
    assert client.get(reverse("app_detail", args=["secret-app"])).status_code == 404

    # Entitled to the tenant: now it shows.
    catalog.entitle(None, netdata, project.tenant)
    assert 'data-app="netdata"' in client.get(reverse("app_catalog")).content.decode()


def test_nav_links_to_apps(as_user, admin, billing_admin, jupyterlab):
    url = reverse("app_catalog")
    assert f'href="{url}"' in as_user(admin).get(reverse("dashboard")).content.decode()
    assert f'href="{url}"' not in as_user(billing_admin).get(reverse("dashboard")).content.decode()


def test_app_detail_shows_versions_endpoints_ui_and_launch(as_user, admin, viewer, project, jupyterlab):
    publish("jupyterlab", version="1.1.0")
    client = as_user(admin)
    url = reverse("app_detail", args=["jupyterlab"])
    assert launch_url(project) not in client.get(url).content.decode()  # no current project yet
    client.get(reverse("instance_list", args=[project.pk]))  # makes the project current
    body = client.get(url).content.decode()
    assert f'href="{launch_url(project)}?version=1.1.0"' in body
    assert f"Launch in {project.name}" in body
    assert "1.0.0" in body
    assert "1.1.0" in body
    assert "latest" in body
    assert 'data-ui-mode="embedded"' in body
    assert "Embedded</strong>: it opens inside the portal." in body
    # The platform's reasoning is there for operators, folded away.
    start = body.index('<details class="operator-details">')
    details = body[start : body.index("</details>", start)]
    assert "it satisfies the gateway contract" in details
    assert "in the browser, through the portal" in body
    assert "/lab" in body
    assert "Stop when idle (minutes)" in body
    assert "5&ndash;1440" in body

    older = client.get(url + "?version=1.0.0").content.decode()
    assert "not the latest" in older
    assert f"{launch_url(project)}?version=1.0.0" in older

    as_viewer = as_user(viewer)
    as_viewer.get(reverse("instance_list", args=[project.pk]))
    assert launch_url(project) not in as_viewer.get(url).content.decode()


# --- the launch form ---------------------------------------------------------------


def test_launch_form_renders_each_parameter_type(as_user, admin, project, other_project, nodes):
    active = allocation_on(project, nodes[0])
    allocation_on(project, nodes[1], Allocation.State.RELEASED)
    allocation_on(other_project, nodes[2])
    publish("every", every_type_manifest(), name="Every type")
    response = as_user(admin).get(launch_url(project, "every"))
    assert response.status_code == 200
    body = response.content.decode()

    integer = field_html(body, "history_hours")
    assert 'type="number"' in integer
    assert 'value="24"' in integer
    assert 'min="1"' in integer
    assert 'max="168"' in integer
    assert 'step="1"' in integer
    assert "History kept (hours)" in integer
    assert "How far back the charts go. From 1 to 168." in integer
    number = field_html(body, "ratio")
    assert 'type="number"' in number
    assert 'value="0.5"' in number
    assert 'step="any"' in number
    assert 'min="0.1"' in number
    assert 'max="1"' in number
    text = field_html(body, "tag")
    assert 'type="text"' in text
    assert 'pattern="^[a-z]+$"' in text
    assert 'maxlength="12"' in text
    assert " required" in text
    assert 'value="' not in text
    boolean = field_html(body, "verbose")
    assert 'type="checkbox"' in boolean
    assert "checked" not in boolean
    assert "Verbose logs" in boolean
    choice = field_html(body, "colour")
    assert "<select" in choice
    assert '<option value="light">light</option>' in choice
    assert '<option value="dark" selected>dark</option>' in choice

    # Only the project's ACTIVE allocations, with their node, flavor and free GPUs.
    assert body.count('<option value="' + str(active.pk)) == 1
    assert f"{nodes[0].hostname} · h100-8x · 8 of 8 GPUs free" in body
    assert nodes[1].hostname not in body
    assert nodes[2].hostname not in body
    assert " style=" not in body
    assert "<script>" not in body


def test_launch_form_defaults_of_the_shipped_apps(as_user, admin, project, allocation, jupyterlab, vllm):
    client = as_user(admin)
    jupyter = client.get(launch_url(project)).content.decode()
    path = field_html(jupyter, "default_path")
    # The manifest's Python pattern, written so that the browser's ``v``-flag regex accepts it.
    assert 'value="/lab"' in path
    assert r'pattern="^/[A-Za-z0-9\/_\-]*$"' in path
    assert 'maxlength="500"' in path
    assert 'value="60"' in field_html(jupyter, "idle_minutes")

    body = client.get(launch_url(project, "vllm-openai")).content.decode()
    assert '<option value="1" selected>1</option>' in field_html(body, "tensor_parallel")
    assert '<option value="8">8</option>' in field_html(body, "tensor_parallel")
    assert 'type="checkbox" name="param_chat_ui"' in body
    assert "checked" in field_html(body, "chat_ui")
    assert 'value="8192"' in field_html(body, "max_model_len")


def test_launch_form_follows_the_chosen_version(as_user, admin, project, allocation, jupyterlab):
    manifest = shipped_manifest("jupyterlab")
    manifest["parameters"].append({"name": "theme", "label": "Theme", "type": "string", "default": "dark"})
    publish("jupyterlab", manifest, version="2.0.0")
    client = as_user(admin)
    latest = client.get(launch_url(project)).content.decode()
    assert 'data-parameter="theme"' in latest
    assert '<option value="2.0.0" selected>' in latest
    older = client.get(launch_url(project) + "?version=1.0.0", **HTMX).content.decode()
    assert older.lstrip().startswith('<form id="launch-form"')  # the version switch swaps the form
    assert 'data-parameter="theme"' not in older
    assert '<option value="1.0.0" selected>' in older


def _post(client, project, allocation, slug="jupyterlab", **values):
    data = {"allocation": str(allocation.pk), "version": "1.0.0", "name": "", **values}
    return client.post(launch_url(project, slug), data)


def test_invalid_values_are_shown_on_their_fields_and_nothing_is_created(
    as_user, admin, project, allocation, jupyterlab
):
    client = as_user(admin)
    response = _post(client, project, allocation, param_default_path="no-slash", param_idle_minutes="1")
    assert response.status_code == 400
    body = response.content.decode()
    assert "Must be at least 5." in field_html(body, "idle_minutes")
    assert "Has the wrong format." in field_html(body, "default_path")
    assert 'value="no-slash"' in body  # what was typed stays
    assert not AppInstance.objects.exists()
    assert not AgentTask.objects.exists()

    # Under htmx the form comes back with a 200, for htmx to swap it in.
    fragment = client.post(
        launch_url(project),
        {"allocation": str(allocation.pk), "version": "1.0.0", "param_idle_minutes": "99999"},
        **HTMX,
    )
    assert fragment.status_code == 200
    assert "Must be at most 1440." in fragment.content.decode()
    assert not AppInstance.objects.exists()


def test_a_required_parameter_and_a_shape_error(as_user, admin, project, allocation):
    publish("every", every_type_manifest(), name="Every type")
    client = as_user(admin)
    body = _post(client, project, allocation, "every", param_tag="").content.decode()
    assert "This parameter is required." in field_html(body, "tag")
    body = _post(client, project, allocation, "every", param_tag="ok", param_ratio="lots").content.decode()
    assert "Enter a number." in field_html(body, "ratio")
    assert not AppInstance.objects.exists()


def test_allocation_errors_are_shown_on_the_allocation(
    as_user, admin, project, other_project, nodes, allocation, jupyterlab
):
    client = as_user(admin)
    releasing = allocation_on(project, nodes[1], Allocation.State.RELEASING)
    foreign = allocation_on(other_project, nodes[2])
    body = _post(client, project, releasing).content.decode()
    assert re.search(r'id="id_allocation_error">The allocation is RELEASING; apps run on ACTIVE', body)
    body = _post(client, project, foreign).content.decode()
    assert 'id="id_allocation_error">Not an allocation of this project.' in body
    assert not AppInstance.objects.exists()


def test_a_node_without_an_agent_is_refused_on_the_allocation(
    as_user, admin, project, allocation, jupyterlab
):
    Node.objects.filter(pk=allocation.node_id).update(credential_hash="")
    client = as_user(admin)
    page = client.get(launch_url(project)).content.decode()
    assert f"{allocation.node.hostname} · h100-8x · 8 of 8 GPUs free · no node agent yet" in page
    body = _post(client, project, allocation).content.decode()
    assert 'id="id_allocation_error">No node agent has enrolled on' in body
    assert not AppInstance.objects.exists()


def test_a_node_without_room_is_a_form_error(as_user, admin, project, allocation, vllm):
    client = as_user(admin)
    first = _post(client, project, allocation, "vllm-openai", param_tensor_parallel="8", param_chat_ui="on")
    assert first.status_code == 302
    response = _post(client, project, allocation, "vllm-openai", param_tensor_parallel="1")
    assert response.status_code == 409
    body = response.content.decode()
    assert 'class="form-errors"' in body
    assert "needs 1 GPU(s); 0 of 8 are free" in body
    assert AppInstance.objects.count() == 1


def test_the_page_offers_the_gpus_the_launch_accepts(as_user, admin, project, allocation, vllm):
    """One rule (``apps.runtime.capacity``) for the page's count and the launch's check:
    what holds GPUs, and what gives them back."""
    client = as_user(admin)
    held = launched(admin, project, allocation, "vllm-openai", tensor_parallel=4)
    free_label = f"{allocation.node.hostname} · h100-8x · {{}} of 8 GPUs free"
    assert free_label.format(4) in client.get(launch_url(project, "vllm-openai")).content.decode()
    refused = _post(client, project, allocation, "vllm-openai", param_tensor_parallel="8")
    assert refused.status_code == 409
    assert "needs 8 GPU(s); 4 of 8 are free" in refused.content.decode()
    assert free_label.format(4) in refused.content.decode()

    agent_finishes(held)
    services.change(principals.for_user(admin), held, "stop")
    agent_finishes(held)
    assert held.state == "stopped"  # a stopped instance holds nothing
    assert free_label.format(8) in client.get(launch_url(project, "vllm-openai")).content.decode()
    assert _post(client, project, allocation, "vllm-openai", param_tensor_parallel="8").status_code == 302
    assert free_label.format(0) in client.get(launch_url(project, "vllm-openai")).content.decode()


def test_too_many_launches_is_a_form_error(as_user, admin, project, allocation, jupyterlab, settings):
    settings.LAUNCH_LIMIT_PER_NODE = 1
    client = as_user(admin)
    assert _post(client, project, allocation).status_code == 302
    response = _post(client, project, allocation)
    assert response.status_code == 429
    assert "Too many launches in progress on this node. Try again in 10 s." in response.content.decode()


def test_not_entitled_is_a_form_error(as_user, tenant_admin, project, other_project, allocation):
    app = publish("netdata", entitled_to_all=False, name="Netdata")
    Entitlement.objects.create(app=app, tenant=project.tenant, project=other_project)
    client = as_user(tenant_admin)
    page = client.get(launch_url(project, "netdata")).content.decode()
    assert "is not entitled to Netdata" in page
    response = _post(client, project, allocation, "netdata")
    assert response.status_code == 403
    assert 'class="form-errors"' in response.content.decode()
    assert "The project is not entitled to Netdata." in response.content.decode()
    assert not AppInstance.objects.exists()


def test_a_valid_launch_creates_the_instance_and_redirects(as_user, admin, project, allocation, vllm):
    client = as_user(admin)
    response = _post(
        client,
        project,
        allocation,
        "vllm-openai",
        name="chat-1",
        param_model="Qwen/Qwen2.5-7B-Instruct",
        param_max_model_len="4096",
        param_tensor_parallel="2",
    )
    instance = AppInstance.objects.get()
    assert response.status_code == 302
    assert response["Location"] == detail_url(instance)
    assert instance.name == "chat-1"
    assert instance.owner == admin
    assert instance.gpus == 2
    # Typed as the manifest says: the choice 2 is a number, the unchecked box false.
    assert instance.parameters == {
        "model": "Qwen/Qwen2.5-7B-Instruct",
        "max_model_len": 4096,
        "tensor_parallel": 2,
        "chat_ui": False,
    }
    assert AuditEvent.objects.filter(action="instance.launch", actor=admin.username).exists()
    body = client.get(response["Location"]).content.decode()
    assert "Launching vLLM OpenAI server 1.0.0 as chat-1" in body
    assert 'data-field="state">requested</span>' in body


def test_launch_under_htmx_answers_hx_redirect(as_user, admin, project, allocation, jupyterlab):
    response = as_user(admin).post(
        launch_url(project), {"allocation": str(allocation.pk), "version": "1.0.0"}, **HTMX
    )
    instance = AppInstance.objects.get()
    assert response.status_code == 200
    assert response["HX-Redirect"] == detail_url(instance)
    assert instance.parameters == {"default_path": "/lab", "idle_minutes": 60}


def test_without_an_active_allocation_the_page_says_so(as_user, admin, project, jupyterlab):
    body = as_user(admin).get(launch_url(project)).content.decode()
    assert "No active node in" in body
    assert 'id="launch-form"' not in body


# --- who sees and does what --------------------------------------------------------


def test_viewers_see_no_actions_and_are_refused(as_user, admin, viewer, project, allocation, jupyterlab):
    instance = launched(admin, project, allocation, idle_minutes=30)
    agent_finishes(instance)
    services.share(principals.for_user(admin), instance, with_project=True)
    client = as_user(viewer)
    client.get(reverse("instance_list", args=[project.pk]))
    assert launch_url(project) not in client.get(reverse("app_detail", args=["jupyterlab"])).content.decode()
    listing = client.get(reverse("instance_list", args=[project.pk])).content.decode()
    assert instance.name in listing
    assert "Launch an app" not in listing
    detail = client.get(detail_url(instance)).content.decode()
    assert "running" in detail
    assert 'data-action="stop"' not in detail
    assert "Save sharing" not in detail

    assert client.get(launch_url(project)).status_code == 403
    assert _post(client, project, allocation).status_code == 403
    for action in ("stop", "start", "delete"):
        assert client.get(action_url(instance, action)).status_code == 403
        assert client.post(action_url(instance, action)).status_code == 403
    share = reverse("instance_share", args=[project.pk, instance.pk])
    assert client.post(share, {"with_project": ""}).status_code == 403
    instance.refresh_from_db()
    assert instance.state == "running"
    assert instance.shared_with_project
    assert AppInstance.objects.count() == 1
    assert AuditEvent.objects.filter(actor=viewer.username, outcome="denied").exists()


def test_a_viewer_sees_only_instances_shared_with_them(
    as_user, admin, viewer, project, allocation, jupyterlab
):
    instance = launched(admin, project, allocation)
    client = as_user(viewer)
    assert instance.name not in client.get(reverse("instance_list", args=[project.pk])).content.decode()
    assert client.get(detail_url(instance)).status_code == 404
    share = reverse("instance_share", args=[project.pk, instance.pk])
    fragment = as_user(admin).post(share, {"with_project": "on"}, **HTMX).content.decode()
    assert 'data-shared-with-project="true"' in fragment
    assert "is shared with the project." in fragment
    assert instance.name in client.get(reverse("instance_list", args=[project.pk])).content.decode()
    assert client.get(detail_url(instance)).status_code == 200
    as_user(admin).post(share, {})  # the box unticked: no longer shared
    assert client.get(detail_url(instance)).status_code == 404


def test_other_tenant_gets_404(
    as_user, outsider, admin, project, allocation, other_tenant_project, jupyterlab
):
    instance = launched(admin, project, allocation)
    client = as_user(outsider)
    assert client.get(reverse("instance_list", args=[project.pk])).status_code == 404
    assert client.get(detail_url(instance)).status_code == 404
    assert client.get(launch_url(project)).status_code == 404
    assert _post(client, project, allocation).status_code == 404
    for action in ("stop", "delete"):
        assert client.get(action_url(instance, action)).status_code == 404
        assert client.post(action_url(instance, action)).status_code == 404
    assert client.post(reverse("instance_share", args=[project.pk, instance.pk]), {}).status_code == 404
    # Their own project's URL with this instance's id: not theirs either.
    assert (
        client.get(reverse("instance_detail", args=[other_tenant_project.pk, instance.pk])).status_code == 404
    )
    instance.refresh_from_db()
    assert instance.state == "requested"
    assert AppInstance.objects.count() == 1


def test_an_instance_shared_by_name_is_visible_to_that_user(
    as_user, admin, project, other_project, allocation, jupyterlab
):
    bob = member("viewer", project=other_project)  # same tenant, no role in the instance's project
    instance = launched(admin, project, allocation)
    as_bob = as_user(bob)
    assert as_bob.get(detail_url(instance)).status_code == 404

    share = reverse("instance_share", args=[project.pk, instance.pk])
    as_admin = as_user(admin)
    refused = as_admin.post(share, {"usernames": "nobody"}, **HTMX)
    assert refused.status_code == 200
    assert "nobody: no such user in this tenant." in refused.content.decode()
    plain = as_admin.post(share, {"usernames": "nobody"})
    assert plain.status_code == 400
    assert 'id="id_usernames_error">nobody: no such user' in plain.content.decode()
    response = as_admin.post(share, {"usernames": bob.username})
    assert response.status_code == 302
    assert response["Location"] == detail_url(instance)
    sharing = as_admin.get(detail_url(instance)).content.decode()
    assert f'data-shared-user="{bob.username}"' in sharing

    page = as_bob.get(detail_url(instance))
    assert page.status_code == 200
    body = page.content.decode()
    assert instance.name in body
    assert "data-instances-live" not in body  # no socket for this project
    assert 'data-action="stop"' not in body
    assert "Save sharing" not in body
    assert as_bob.get(reverse("instance_list", args=[project.pk])).status_code == 404
    assert as_bob.post(action_url(instance, "stop")).status_code == 403

    fragment = as_admin.post(share, {"revoke": bob.username}, **HTMX).content.decode()
    assert f'data-shared-user="{bob.username}"' not in fragment
    assert "no longer sees" in fragment
    assert as_bob.get(detail_url(instance)).status_code == 404


@pytest.mark.parametrize("revoke", ["bob\x00", "x" * 100_000])
def test_a_revoke_that_is_no_username_is_a_400(as_user, admin, project, allocation, jupyterlab, revoke):
    """A NUL byte reached PostgreSQL (a 500); a long name went whole into the audit event
    and the message kept in the session."""
    instance = launched(admin, project, allocation)
    share = reverse("instance_share", args=[project.pk, instance.pk])
    response = as_user(admin).post(share, {"revoke": revoke})
    assert response.status_code == 400
    assert not AuditEvent.objects.filter(action="instance.share").exists()


# --- stop, start, delete -----------------------------------------------------------


def _actions(body: str) -> set[str]:
    return set(re.findall(r'data-action="(\w+)"', body))


def test_stop_start_and_delete_through_the_pages(as_user, admin, project, allocation, jupyterlab):
    client = as_user(admin)
    response = _post(client, project, allocation, name="nb")
    instance = AppInstance.objects.get()
    assert _actions(client.get(response["Location"]).content.decode()) == {"delete"}
    agent_finishes(instance)
    assert _actions(client.get(detail_url(instance)).content.decode()) == {"stop", "delete"}

    # Stop: confirmed on its own page, then the instance is stopping until the agent is done.
    confirm = client.get(action_url(instance, "stop")).content.decode()
    assert "Stop nb?" in confirm
    assert f'action="{action_url(instance, "stop")}"' in confirm
    response = client.post(action_url(instance, "stop"))
    assert response.status_code == 302
    assert response["Location"] == detail_url(instance)
    instance.refresh_from_db()
    assert instance.state == "stopping"
    body = client.get(detail_url(instance)).content.decode()
    assert "Stop: nb is stopping." in body
    assert _actions(body) == {"delete"}
    agent_finishes(instance)
    assert instance.state == "stopped"
    assert _actions(client.get(detail_url(instance)).content.decode()) == {"start", "delete"}
    # Stopping what is stopped: nothing to confirm.
    assert client.get(action_url(instance, "stop")).status_code == 302

    assert "Start nb?" in client.get(action_url(instance, "start")).content.decode()
    client.post(action_url(instance, "start"))
    instance.refresh_from_db()
    assert instance.state == "starting"
    agent_finishes(instance)
    assert instance.state == "running"

    assert "This cannot be undone." in client.get(action_url(instance, "delete")).content.decode()
    client.post(action_url(instance, "delete"))
    instance.refresh_from_db()
    assert instance.state == "decommissioning"
    agent_finishes(instance)
    assert instance.state == "deleted"
    assert AuditEvent.objects.filter(action="instance.decommission", actor=admin.username).exists()

    listing = reverse("instance_list", args=[project.pk])
    assert 'id="instance-row-' not in client.get(listing).content.decode()
    assert f'id="instance-row-{instance.pk}"' in client.get(listing + "?state=deleted").content.decode()
    assert client.get(action_url(instance, "explode")).status_code == 404


# --- the pages ---------------------------------------------------------------------


def test_workload_shell_tabs_show_status_members_access_and_events(as_user, admin, project, allocation):
    publish("every", every_type_manifest(), name="Every type")
    instance = launched(admin, project, allocation, "every", tag="abc")
    node = allocation.node
    [task] = agents.claim_tasks(node)
    agents.report_task(
        node,
        task.pk,
        succeeded=True,
        endpoints=[
            {"name": "dashboard", "host": "127.0.0.1", "port": 41000},
            {"name": "shell", "host": "127.0.0.1", "port": 42222},
        ],
    )
    client = as_user(admin)
    overview = client.get(detail_url(instance)).content.decode()
    tabs = re.findall(r'data-tab="(\w+)"', overview)
    assert tabs == ["overview", "app", "logs", "events", "access"]
    assert 'data-parameter="tag">abc<' in overview
    assert 'data-parameter="verbose">no<' in overview
    assert "Sampling ratio" in overview
    assert f'<td class="mono">{node.hostname}</td>' in overview  # the member
    assert f'data-ws-url="/ws/projects/{project.pk}/instances/"' in overview

    access = client.get(detail_url(instance) + "?tab=access").content.decode()
    launcher = reverse("instance_open", args=[project.pk, instance.pk, "dashboard"])
    proxy_url = f"http://127.0.0.1:8000/w/{instance.pk}/dashboard/"
    assert (
        f'href="{launcher}" target="_blank" rel="noopener" data-open-endpoint="dashboard">{proxy_url}<'
        in access
    )
    assert "SSH access to the node is not ready yet" in access  # its sshd has not reported
    assert "Interface: <strong>Embedded</strong>" in access
    assert "served from the portal's own address" in access  # no apps domain here: a path-prefix route

    # Once the node's agent reports its SSH server: the real tunnel, as the runtime user.
    host_access.agent_report(node, user="gpuaas", port=2222, host_keys=[MATRIX_KEYS[0]], applied=[])
    access = client.get(detail_url(instance) + "?tab=access").content.decode()
    tunnel = f"ssh -N -L 42222:127.0.0.1:42222 -p 2222 gpuaas@{node.agent_address}"
    assert f'data-tunnel="shell">{tunnel}</code>' in access
    assert 'then open <span class="mono">http://127.0.0.1:42222/</span>' in access

    app = client.get(detail_url(instance) + "?tab=app").content.decode()
    assert f'<iframe class="app-frame" src="{launcher}?embed=1"' in app
    assert 'data-refresh-on="state"' in app  # live updates must not reload the app on every event

    events = client.get(detail_url(instance) + "?tab=events").content.decode()
    states = re.findall(r'<span class="badge badge-\w+">(requested|starting|running)</span>', events)
    assert states == ["running", "starting", "requested"]
    for body in (overview, access, app, events):
        assert " style=" not in body
        assert "<script>" not in body


def test_link_out_and_native_apps_have_their_own_shell(as_user, admin, platform_admin, project, allocation):
    publish("every", every_type_manifest(), name="Every type")
    instance = launched(admin, project, allocation, "every", tag="abc")
    client = as_user(admin)
    proxy_services.set_ui_mode(principals.for_user(platform_admin), instance, "link_out")
    app = client.get(detail_url(instance) + "?tab=app").content.decode()
    assert "The app opens here as soon as it is running." in app
    assert "<iframe" not in app
    AppInstance.objects.filter(pk=instance.pk).update(state="running")
    app = client.get(detail_url(instance) + "?tab=app").content.decode()
    assert "<iframe" not in app
    assert ">Open app</a>" in app
    assert "an operator chose to open it in its own tab" in app

    proxy_services.set_ui_mode(principals.for_user(platform_admin), instance, "native")
    overview = client.get(detail_url(instance)).content.decode()
    assert re.findall(r'data-tab="(\w+)"', overview) == ["overview", "logs", "events", "access"]


def test_launcher_page_may_be_framed_by_the_portal_only_and_posts_tickets_to_the_route(
    as_user, admin, project, allocation, settings
):
    settings.APPS_DOMAIN = "apps.example.test"
    publish("every", every_type_manifest(), name="Every type")
    instance = launched(admin, project, allocation, "every", tag="abc")
    route = instance.proxy_routes.get()
    response = as_user(admin).get(reverse("instance_open", args=[project.pk, instance.pk, "dashboard"]))
    assert response.status_code == 200
    assert response["X-Frame-Options"] == "SAMEORIGIN"
    csp = response["Content-Security-Policy"]
    assert "frame-ancestors 'self'" in csp
    assert f"form-action 'self' http://{route.slug}.apps.example.test:8000" in csp
    body = response.content.decode()
    assert f'data-session-url="/api/v1/workloads/{instance.pk}/ui/session"' in body
    detail = as_user(admin).get(detail_url(instance) + "?tab=app")
    assert f"frame-src 'self' http://{route.slug}.apps.example.test:8000" in detail["Content-Security-Policy"]


def test_launcher_is_404_outside_the_callers_scope(as_user, admin, project, allocation, other_tenant_project):
    publish("every", every_type_manifest(), name="Every type")
    instance = launched(admin, project, allocation, "every", tag="abc")
    stranger = member("project_admin", project=other_tenant_project)
    url = reverse("instance_open", args=[project.pk, instance.pk, "dashboard"])
    assert as_user(stranger).get(url).status_code == 404


def test_live_fragments(as_user, admin, project, allocation, jupyterlab):
    instance = launched(admin, project, allocation)
    client = as_user(admin)
    body = client.get(
        detail_url(instance), HTTP_HX_REQUEST="true", HTTP_HX_TARGET="instance-detail-body"
    ).content.decode()
    assert "<html" not in body
    assert 'id="messages"' not in body
    assert 'data-field="state">requested<' in body
    table = client.get(
        reverse("instance_list", args=[project.pk]) + "?state=requested",
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="instance-table",
    ).content.decode()
    assert "<html" not in table
    assert f'id="instance-row-{instance.pk}"' in table
    assert 'aria-current="true">Requested <span class="count">1</span>' in table


def test_the_runtime_secret_never_appears(as_user, admin, project, allocation, jupyterlab):
    client = as_user(admin)
    _post(client, project, allocation, name="nb")
    instance = AppInstance.objects.get()
    agent_finishes(instance)
    token = selectors.runtime_secret(instance, "token")
    assert token
    assert len(token) >= 16
    pages = [
        reverse("app_catalog"),
        reverse("app_detail", args=["jupyterlab"]),
        launch_url(project),
        reverse("instance_list", args=[project.pk]),
        detail_url(instance),
        action_url(instance, "stop"),
        action_url(instance, "delete"),
    ]
    for url in pages:
        response = client.get(url)
        assert response.status_code == 200, url
        assert token not in response.content.decode(), url
    fragment = client.get(detail_url(instance), HTTP_HX_REQUEST="true", HTTP_HX_TARGET="instance-detail-body")
    assert token not in fragment.content.decode()


@pytest.mark.parametrize("rows", [3, 20])
def test_instance_list_query_budget(
    rows, as_user, admin, project, nodes, jupyterlab, django_assert_max_num_queries
):
    allocations = [allocation_on(project, node) for node in nodes]
    for n in range(rows):
        launched(admin, project, allocations[n % len(allocations)])
        AppInstance.objects.filter(state="requested").update(state="running")  # past the launch throttle
    client = as_user(admin)
    url = reverse("instance_list", args=[project.pk])
    client.get(url)  # the session already names the current project
    with django_assert_max_num_queries(INSTANCE_LIST_BUDGET):
        response = client.get(url)
    assert response.status_code == 200
    assert response.content.count(b'data-instance-id="') == rows


def test_instance_list_queries_do_not_grow_with_rows(as_user, admin, project, nodes, jupyterlab):
    allocations = [allocation_on(project, node) for node in nodes]
    client = as_user(admin)
    url = reverse("instance_list", args=[project.pk])
    counts = []
    for batch in (3, 17):
        for n in range(batch):
            launched(admin, project, allocations[n % len(allocations)])
            AppInstance.objects.filter(state="requested").update(state="running")
        client.get(url)
        with CaptureQueriesContext(connection) as queries:
            response = client.get(url)
        assert response.status_code == 200
        counts.append(len(queries))
    assert counts[0] == counts[1]
