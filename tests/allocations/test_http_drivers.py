"""The real MAAS and NDFC drivers, against local servers that speak those APIs."""

from __future__ import annotations

import base64
import re
import time

import pytest
import yaml

from apps.allocations import pipeline, services
from apps.allocations.drivers import maas
from apps.allocations.models import Allocation
from apps.core.drivers import DriverError
from apps.networking.drivers import ndfc
from apps.tenancy import principal as principals

pytestmark = pytest.mark.django_db


def drive(allocation, until):
    """Run the pipeline in this thread (as a worker would) until ``until(allocation)``."""
    for _ in range(400):
        allocation.refresh_from_db()
        if until(allocation):
            return allocation
        wait = pipeline.advance(allocation.pk)
        time.sleep(wait or 0)
    raise AssertionError(f"stuck in {allocation.state}/{allocation.step}")


def test_pipeline_runs_against_maas_and_ndfc_apis_and_the_agent_enrolls(
    real_drivers, fake_maas, fake_ndfc, allocator, project, nodes, api, django_capture_on_commit_callbacks
):
    caller = principals.for_user(allocator)
    with django_capture_on_commit_callbacks(execute=False):
        [allocation] = services.allocate(caller, project, flavor_name="h100-8x", os_image="ubuntu-22.04")
    drive(allocation, lambda a: a.step == "agent")
    machine = next(m for m in fake_maas.machines.values() if m["hostname"] == allocation.node.hostname)
    assert machine["status_name"] == "Deployed"
    assert machine["distro_series"] == "ubuntu-22.04"
    attachment = fake_ndfc.attachments[(allocation.node.switch_serial, allocation.node.switch_port)]
    assert attachment["vrf"].startswith("vrf-")
    assert attachment["vlan"] > 0
    assert [op for _, _, op, _ in fake_maas.calls if op][:2] == ["allocate", "deploy"]

    # The deployed OS runs cloud-init: its agent enrolls with the bootstrap token, then reports in.
    user_data = base64.b64decode(machine["user_data"]).decode()
    token = re.search(r"GPUAAS_BOOTSTRAP_TOKEN=(\S+)", user_data).group(1)
    # It also makes the flavor's runtime user, without keys: the agent manages those.
    config = yaml.safe_load(user_data)
    [runtime_user] = [user for user in config["users"] if user != "default"]
    assert runtime_user["name"] == "gpuaas"
    assert runtime_user["lock_passwd"] is True
    assert "ssh_authorized_keys" not in runtime_user
    assert "GPUAAS_SSH=system" in config["write_files"][0]["content"]
    enrolled = api.post(
        "/api/agent/v1/enroll",
        {"hostname": allocation.node.hostname, "bootstrap_token": token},
        format="json",
    )
    assert enrolled.status_code == 201, enrolled.content
    again = api.post(
        "/api/agent/v1/enroll",
        {"hostname": allocation.node.hostname, "bootstrap_token": token},
        format="json",
    )
    assert again.status_code == 401  # the bootstrap token is single-use
    credential = enrolled.json()["credential"]
    assert api.post("/api/agent/v1/heartbeat", HTTP_AUTHORIZATION=f"Node {credential}").status_code == 204
    allocation = drive(allocation, lambda a: a.state != Allocation.State.PROVISIONING)
    assert allocation.state == Allocation.State.ACTIVE, allocation.failure_reason

    with django_capture_on_commit_callbacks(execute=False):
        services.release(caller, allocation, erase_disk=True)
    allocation = drive(allocation, lambda a: a.state == Allocation.State.RELEASED)
    assert fake_maas.view(machine)["status_name"] == "Ready"
    assert (
        "POST",
        f"/MAAS/api/2.0/machines/{machine['system_id']}/",
        "release",
        {"erase": "true"},
    ) in fake_maas.calls
    assert not fake_ndfc.attachments


def test_maas_rejects_a_wrong_api_key(settings, fake_maas, nodes):
    settings.MAAS_API_KEY = "consumer:token:wrong"
    with pytest.raises(DriverError, match="401"):
        maas.HttpMaas().allocate(nodes[0])


def test_maas_server_errors_are_transient(fake_maas, nodes):
    fake_maas.fail_next = [503]
    with pytest.raises(DriverError) as raised:
        maas.HttpMaas().status(nodes[0])
    assert raised.value.transient


def test_maas_allocate_and_deploy_are_idempotent(fake_maas, nodes):
    driver = maas.HttpMaas()
    driver.allocate(nodes[0])
    driver.allocate(nodes[0])
    driver.deploy(nodes[0], "ubuntu-22.04", "#cloud-config\n")
    driver.deploy(nodes[0], "ubuntu-22.04", "#cloud-config\n")
    assert [op for _, _, op, _ in fake_maas.calls if op] == ["allocate", "deploy"]


def test_ndfc_logs_in_again_when_its_session_expires(fake_ndfc, nodes):
    driver = ndfc.HttpNdfc()
    driver.attach(nodes[0], "vrf-1", {"gpu_worker": 1001})
    fake_ndfc.expire_sessions()
    driver.detach(nodes[0], "vrf-1")
    assert fake_ndfc.logins == 2
    assert not fake_ndfc.attachments


def test_ndfc_wrong_password_is_not_retried(settings, fake_ndfc, nodes):
    settings.NDFC_PASSWORD = "nope"
    with pytest.raises(DriverError) as raised:
        ndfc.HttpNdfc().attach(nodes[0], "vrf-1", {"gpu_worker": 1001})
    assert not raised.value.transient


def test_node_without_switch_port_is_a_hardware_fault(fake_ndfc, nodes):
    nodes[0].switch_serial = ""
    with pytest.raises(DriverError) as raised:
        ndfc.HttpNdfc().attach(nodes[0], "vrf-1", {"gpu_worker": 1001})
    assert raised.value.hardware
    assert not raised.value.transient
