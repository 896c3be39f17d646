"""The demo tenant as ``make run`` seeds it, with an ACTIVE allocation and an app
instance on it, written directly (see allocations.py): the pages a newcomer sees, with
something on each."""

from __future__ import annotations

from io import StringIO
from types import SimpleNamespace

from django.core.management import call_command
from django.urls import reverse

from apps.allocations.models import Node
from apps.catalog.models import AppVersion
from apps.tenancy.models import Project
from tests.factories import AllocationFactory, AppInstanceFactory


def seed_demo() -> SimpleNamespace:
    call_command("bootstrap_demo", stdout=StringIO())
    project = Project.objects.get(tenant__tenant_id="demo", project_id="demo")
    free = Node.objects.filter(flavor__name="h100-8x", state=Node.State.AVAILABLE)
    node = free.order_by("hostname").first()
    node.state = Node.State.ALLOCATED
    node.save(update_fields=["state"])
    allocation = AllocationFactory(node=node, project=project, requested_by="demo")
    version = AppVersion.objects.filter(app__slug="jupyterlab", status=AppVersion.Status.PUBLISHED).first()
    instance = AppInstanceFactory(
        allocation=allocation, app_version=version, name="notebook", created_by="demo"
    )
    return SimpleNamespace(project=project, allocation=allocation, instance=instance)


def main_pages(world: SimpleNamespace) -> dict[str, str]:
    """Name to path of the portal's main pages, for the demo user."""
    project = world.project.pk
    return {
        "dashboard": reverse("dashboard"),
        "projects": reverse("project_list"),
        "project": reverse("project_detail", args=[project]),
        "allocations": reverse("allocation_list", args=[project]),
        "allocation-new": reverse("allocation_create", args=[project]),
        "allocation": reverse("allocation_detail", args=[project, world.allocation.pk]),
        "apps": reverse("app_catalog"),
        "app": reverse("app_detail", args=["jupyterlab"]),
        "instances": reverse("instance_list", args=[project]),
        "instance": reverse("instance_detail", args=[project, world.instance.pk]),
        "usage": reverse("tenant_usage", args=["demo"]),
        "quota": reverse("tenant_quota", args=["demo"]),
        "alerts": reverse("alert_list"),
        "audit": reverse("audit_log"),
        "profile": reverse("profile"),
    }
