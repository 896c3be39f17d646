"""factory_boy factories: a valid object in one call, with only what a test cares
about spelled out. Defaults describe the common case (an 8-GPU H100 flavor, a node
ready to schedule, an allocation that is ACTIVE); a test overrides the rest."""

from __future__ import annotations

import json
from pathlib import Path

import factory
from django.contrib.auth import get_user_model

from apps.allocations.models import Allocation, Node
from apps.catalog.models import App, AppVersion, Flavor
from apps.runtime.models import AppInstance
from apps.tenancy.models import Membership, Project, Quota, ServiceAccount, Tenant

SHIPPED = Path(__file__).resolve().parents[1] / "apps" / "catalog" / "shipped"


def shipped_manifest(slug: str) -> dict:
    """The manifest of a catalog app that ships with the platform (apps/catalog/shipped/)."""
    return json.loads((SHIPPED / f"{slug}.json").read_text())


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant

    tenant_id = factory.Sequence(lambda n: f"tenant-{n}")
    name = factory.Sequence(lambda n: f"Tenant {n}")
    realm_name = factory.SelfAttribute("tenant_id")
    status = Tenant.Status.ACTIVE


class ProjectFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Project

    tenant = factory.SubFactory(TenantFactory)
    project_id = factory.Sequence(lambda n: f"project-{n}")
    name = factory.Sequence(lambda n: f"Project {n}")


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()

    username = factory.Sequence(lambda n: f"user{n}")
    # Hashed before the one INSERT: setting it after creation saved every user twice,
    # and each save of an existing user invalidates its proxy sessions and re-checks
    # its keys and terminals (the receivers of access, proxy and runtime).
    password = factory.django.Password("pw")


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    role = "viewer"


class ServiceAccountFactory(factory.django.DjangoModelFactory):
    """A project's viewer account; its secret is never used (tests that sign in with one
    create it through ``tenancy.services``)."""

    class Meta:
        model = ServiceAccount

    project = factory.SubFactory(ProjectFactory)
    tenant = factory.SelfAttribute("project.tenant")
    name = factory.Sequence(lambda n: f"sa-{n}")
    client_id = factory.Sequence(lambda n: f"sa-client-{n}")
    secret_hash = "x"
    role = "viewer"


class QuotaFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Quota

    tenant = factory.SubFactory(TenantFactory)
    resource = "gpus"
    limit = 16


class FlavorFactory(factory.django.DjangoModelFactory):
    """An 8-GPU H100 node type; tests that allocate by name pass ``name="h100-8x"``."""

    class Meta:
        model = Flavor

    name = factory.Sequence(lambda n: f"flavor-{n}")
    gpu_model = "H100"
    gpus_per_node = 8
    cpu_cores = 112
    memory_gb = 2048


class NodeFactory(factory.django.DjangoModelFactory):
    """A node an operator approved and the scheduler may place an allocation on."""

    class Meta:
        model = Node

    hostname = factory.Sequence(lambda n: f"gpu-{n:03d}")
    flavor = factory.SubFactory(FlavorFactory)
    state = Node.State.AVAILABLE
    approved = True


class AllocationFactory(factory.django.DjangoModelFactory):
    """An ACTIVE allocation of a whole node, written directly (no pipeline runs)."""

    class Meta:
        model = Allocation

    node = factory.SubFactory(NodeFactory, state=Node.State.ALLOCATED)
    project = factory.SubFactory(ProjectFactory)
    tenant = factory.SelfAttribute("project.tenant")
    flavor = factory.SelfAttribute("node.flavor")
    gpus = factory.SelfAttribute("flavor.gpus_per_node")
    os_image = "ubuntu-22.04"
    requested_by = "test"
    state = Allocation.State.ACTIVE
    progress = 100


class AppFactory(factory.django.DjangoModelFactory):
    """A catalog app every tenant may launch; without versions (see AppVersionFactory)."""

    class Meta:
        model = App

    slug = factory.Sequence(lambda n: f"app-{n}")
    name = factory.LazyAttribute(lambda app: app.slug.title())
    entitled_to_all = True


class AppVersionFactory(factory.django.DjangoModelFactory):
    """A draft version with JupyterLab's manifest, written directly: what the admin edits
    before publishing (``catalog.publish_version`` checks and publishes one)."""

    class Meta:
        model = AppVersion

    app = factory.SubFactory(AppFactory)
    version = "1.0.0"
    manifest = factory.LazyFunction(lambda: shipped_manifest("jupyterlab"))


class AppInstanceFactory(factory.django.DjangoModelFactory):
    """An instance record on an allocation, written directly: no agent is asked to start it."""

    class Meta:
        model = AppInstance

    allocation = factory.SubFactory(AllocationFactory)
    project = factory.SelfAttribute("allocation.project")
    tenant = factory.SelfAttribute("allocation.tenant")
    app_version = factory.SubFactory(AppVersionFactory)
    app = factory.SelfAttribute("app_version.app")
    name = factory.Sequence(lambda n: f"instance-{n}")
    created_by = "test"
