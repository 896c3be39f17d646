"""Bad input gets a 4xx in the error envelope, never a 500: schemathesis drives every
operation of ``/api/schema/`` with a caller of each role, and every operation of the
node agents' ``/api/agent/schema/`` as an agent and as nobody, against real PostgreSQL.

Each response must be no 5xx, documented (status, content type, body schema), and
every error must carry the contract's envelope. Path parameters the generator meant
to be valid are the ids of real objects (a tenant with an ACTIVE allocation, an app
instance, a member, a service account, an agent task), so requests reach the
handlers instead of answering 404; invalid ones are sent as generated.

Not checked: whether the API accepts every value the schema allows and refuses every
other (schemathesis' positive_data_acceptance and negative_data_rejection), because
the schema does not state every format and choice the serializers and services
check (an ``os_image`` from settings, an existing username, quota keys).

The smoke (``make test``) is deterministic: the seed is fixed, each operation gets
``GPUAAS_FUZZ_EXAMPLES`` (3) generated cases for every role, and one role also gets
the coverage phase (every boundary and malformed value of each parameter, about
2,000 requests). ``make fuzz`` runs 50 cases and the coverage phase for every role.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass, field

import pytest
import schemathesis
from django.core import signals
from django.core.handlers.wsgi import WSGIHandler
from django.db import close_old_connections
from schemathesis.config import SchemathesisConfig
from schemathesis.core.parameters import ParameterLocation
from schemathesis.generation import GenerationMode

from apps.access import services as access
from apps.allocations import services as allocations
from apps.allocations.models import Node
from apps.catalog.models import Flavor
from apps.core import crypto
from apps.networking import services as networking
from apps.runtime import services as runtime
from apps.runtime.models import AgentTask
from apps.storage import services as storage
from apps.tenancy import principal as principals
from apps.tenancy import quotas
from apps.tenancy import services as tenancy
from apps.tenancy.auth import platform_tokens
from apps.tenancy.models import Membership
from apps.tenancy.roles import Role
from tests.factories import ProjectFactory, TenantFactory
from tests.support.catalog import publish
from tests.support.fleet import make_nodes
from tests.support.issuer import FakeIssuer
from tests.support.members import member
from tests.support.world import MATRIX_KEYS

pytestmark = [pytest.mark.heavy, pytest.mark.django_db, pytest.mark.fuzz]

EXAMPLES = int(os.environ.get("GPUAAS_FUZZ_EXAMPLES", "3"))
# The roles that also get the coverage phase: "all" in ``make fuzz``.
COVERAGE_ROLES = set(os.environ.get("GPUAAS_FUZZ_COVERAGE", "tenant_admin").split(","))
SEED = int(os.environ.get("GPUAAS_FUZZ_SEED", "20240915"))

# Each caller as it authenticates in production: CCP's users and CCP itself with
# JWTs from a trusted issuer, machines with platform-signed tokens, agents with their
# node credential.
CCP_ROLES = {
    "tenant_owner": "Tenant Super Administrator",
    "tenant_admin": "Tenant Administrator",
    "project_admin": "Cell Administrator",
    "container_admin": "Cell Container Admin",
    "viewer": "Cell Viewer",
    "billing_admin": "Tenant Billing Admin",
    "ccp_integration": "GPUaaS Platform Integration",
}
ROLES = [*CCP_ROLES, "service_account", "platform_operator", "node_agent", "anonymous"]


@schemathesis.check
def error_envelope(ctx, response, case):
    """Every 4xx and 5xx answer carries the contract's envelope with this request's id
    (a replayed idempotent answer keeps the first request's: its body is the first one's)."""
    if response.status_code < 400:
        return None
    try:
        body = json.loads(response.content)
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    header = response.headers.get("x-correlation-id", [None])[0]
    replayed = response.headers.get("idempotent-replayed", [""])[0] == "true"
    problem = None
    if not isinstance(body, dict) or set(body) != {"error"} or not isinstance(error, dict):
        problem = f"the body is not an error envelope: {response.content[:200]!r}"
    elif not (isinstance(error.get("code"), str) and error["code"]):
        problem = "error.code is missing"
    elif not (isinstance(error.get("message"), str) and error["message"]):
        problem = "error.message is missing"
    elif not isinstance(error.get("details"), dict):
        problem = "error.details is not an object"
    elif error.get("correlation_id") != header and not replayed:
        problem = "error.correlation_id is not the response's X-Correlation-ID"
    assert problem is None, f"{response.status_code} outside the error envelope: {problem}"
    return None


@dataclass
class FuzzWorld:
    headers: dict = field(default_factory=dict)  # role -> callable giving its Authorization header
    ids: dict = field(default_factory=dict)  # path parameter values, by name or (path, name)
    body: dict = field(default_factory=dict)  # body field values naming real objects


def _build_world(issuer: FakeIssuer, capture) -> FuzzWorld:
    tenant = TenantFactory(tenant_id="acme", name="Acme")
    project = ProjectFactory(tenant=tenant, project_id="cell-1", name="Cell 1")
    ProjectFactory(tenant=tenant, project_id="cell-2", name="Cell 2")
    networking.load_pool(prefix="vrf", count=4, first_vni=50001, first_vlan=1000)
    networking.assign_tenant_network(tenant)
    storage.provision_tenant_storage(tenant)
    quotas.set_quota(tenant, {"gpus": 64, "nodes": 8, "storage_gb": 1_000_000})
    flavor = Flavor.objects.create(
        name="h100-8x", gpu_model="H100", gpus_per_node=8, cpu_cores=112, memory_gb=2048
    )
    make_nodes(flavor, 4)
    allocator = principals.for_user(member("project_admin", project=project))
    with capture(execute=True):
        # One for the app instance, one for the release operation to release.
        allocation, released = allocations.allocate(
            allocator, project, flavor_name="h100-8x", os_image="ubuntu-22.04", count=2
        )
    allocation.refresh_from_db()
    assert allocation.state == "ACTIVE"
    credential = crypto.new_secret()
    Node.objects.filter(pk=allocation.node_id).update(
        credential_hash=crypto.hash_secret(credential), agent_address="127.0.0.1"
    )
    app = publish("jupyterlab")
    operation = runtime.launch(allocator, project, app_slug=app.slug, allocation_id=allocation.pk)
    instance = operation.instance
    task = AgentTask.objects.filter(instance=instance).first()
    target_member = Membership.objects.get(user=member("viewer", project=project))
    target_key = access.add_key(allocator, allocation, MATRIX_KEYS[0], "user")

    operator = principals.for_user(member("tenant_admin", tenant=tenant))
    machine = tenancy.create_service_account(operator, project, name="fuzz-bot", role=Role.PROJECT_ADMIN)
    target_account = tenancy.create_service_account(
        operator, project, name="target", role=Role.VIEWER
    ).account
    platform = tenancy.create_platform_service_account(None, name="operator-bot", role=Role.PLATFORM_ADMIN)

    def ccp(role_name: str):
        claims = {
            "sub": uuid.uuid4().hex,  # one principal per role, as one CCP user would be
            "domain_id": tenant.tenant_id,
            "project_id": project.project_id,
            "roles": [role_name],
        }
        return _Minted(lambda: issuer.token(claims, lifetime=600))

    def platform_token(account):
        return _Minted(lambda: platform_tokens.issue_for_service_account(account)[0])

    headers = {role: ccp(name) for role, name in CCP_ROLES.items()}
    headers.update(
        service_account=platform_token(machine.account),
        platform_operator=platform_token(platform.account),
        node_agent=lambda: f"Node {credential}",
        anonymous=lambda: None,
    )
    ids = {
        "tenant_id": tenant.tenant_id,
        "project_pk": str(project.pk),
        "node_id": str(released.node_id),
        "slug": app.slug,
        "version": "1.0.0",
        "iid": str(instance.pk),
        "task_id": str(task.pk),
        ("/api/v1/projects/{id}", "id"): str(project.pk),
        ("/api/v1/tenants/{id}", "id"): str(tenant.pk),
        ("/api/v1/operations/{id}", "id"): str(operation.pk),
        ("/api/v1/projects/{project_pk}/allocations/{id}", "id"): str(allocation.pk),
        ("/api/v1/projects/{project_pk}/members/{id}", "id"): str(target_member.pk),
        ("/api/v1/projects/{project_pk}/service-accounts/{id}", "id"): str(target_account.pk),
        ("/api/v1/projects/{project_pk}/app-instances/{id}", "id"): str(instance.pk),
        **{(f"{ALLOCATION}/{tail}", "id"): str(allocation.pk) for tail in ACCESS_PATHS},
        "kid": str(target_key.pk),
    }
    body = {
        "tenant_id": tenant.tenant_id,
        "project_id": project.project_id,
        "tenant": str(tenant.pk),
        "flavor": flavor.name,
        "os_image": "ubuntu-22.04",
        "app": app.slug,
        "version": "1.0.0",
        "allocation_id": str(allocation.pk),
        "username": target_member.user.username,
    }
    return FuzzWorld(headers=headers, ids=ids, body=body)


class _Minted:
    """A bearer token minted once and again before it expires (``make fuzz`` runs long)."""

    def __init__(self, mint):
        self.mint, self.token, self.at = mint, "", 0.0

    def __call__(self) -> str:
        if time.monotonic() - self.at > 240:
            self.token, self.at = self.mint(), time.monotonic()
        return f"Bearer {self.token}"


ALLOCATION = "/api/v1/projects/{project_pk}/allocations/{id}"
ACCESS_PATHS = ("access", "authorized-keys", "authorized-keys/{kid}")


# Body fields that name existing objects, by operation; the others keep their generated
# values (a new tenant, project or service account is still made up).
REAL_BODY_FIELDS = {
    "POST /api/baremetal-manager/allocate": ("tenant_id", "project_id", "flavor", "os_image"),
    "POST /api/network-manager/vpc": ("tenant_id", "project_id"),
    "POST /api/storage/tenant": ("tenant_id",),
    "POST /api/v1/projects": ("tenant",),
    "POST /api/v1/projects/{project_pk}/allocations": ("flavor", "os_image"),
    "POST /api/v1/projects/{project_pk}/app-instances": ("app", "version", "allocation_id"),
    "POST /api/v1/projects/{project_pk}/members": ("username",),
}


def _valid(case, location: ParameterLocation) -> bool:
    info = case.meta.components.get(location) if case.meta else None
    return info is None or info.mode == GenerationMode.POSITIVE


def _point_at_real_objects(case, world: FuzzWorld) -> None:
    """Valid ids name objects that exist, so the request reaches the handler; invalid ones stay."""
    if case.path_parameters and _valid(case, ParameterLocation.PATH):
        for name in case.path_parameters:
            real = world.ids.get((case.path, name)) or world.ids.get(name)
            if real is not None:
                case.path_parameters[name] = real
    if isinstance(case.body, dict) and _valid(case, ParameterLocation.BODY):
        for name in REAL_BODY_FIELDS.get(case.operation.label, ()):
            if name in case.body:
                case.body[name] = world.body[name]


# The agents' document as the callers its endpoints are for; the others get 401 there
# as they do from the agent endpoints they reach through nothing documented to them.
TARGETS = [
    *[pytest.param(("/api/schema/", role), id=role) for role in ROLES],
    *[pytest.param(("/api/agent/schema/", role), id=f"agent-{role}") for role in ("node_agent", "anonymous")],
]


@pytest.fixture(params=TARGETS)
def target(request):
    # schemathesis' lazy schema renames the running item through ``_nodeid``, which
    # pytest 9.2 no longer has; the copy it reads and writes only labels the subtests.
    request.node._nodeid = request.node.nodeid
    return request.param


@pytest.fixture
def role(target):
    return target[1]


@pytest.fixture
def fuzz_world(settings, django_capture_on_commit_callbacks):
    issuer = FakeIssuer()
    settings.TRUSTED_ISSUERS = [issuer.config]
    settings.AGENT_POLL_SECONDS = 0.05  # a generated `wait` must not hold the run
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"principal": "1000000/min"},
    }
    world = _build_world(issuer, django_capture_on_commit_callbacks)
    # The WSGI handler runs in this thread, on the test's transaction: it must not close
    # the connection after each request (Django's test client leaves it open the same way).
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield world
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)
    issuer.close()


CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "response_headers_conformance",
    "missing_required_header",
    "ignored_auth",
    "unsupported_method",
    "allow_header_conformance",
    "error_envelope",
)


CHECKED = {"enabled": False, **{name: {"enabled": True} for name in CHECKS}}


@pytest.fixture
def api_schema(fuzz_world, target):
    url, role = target
    config = SchemathesisConfig.from_dict(
        {
            "seed": SEED,
            "generation": {"max-examples": EXAMPLES, "deterministic": True, "database": "none"},
            "phases": {
                "stateful": {"enabled": False},
                "coverage": {"enabled": {"all"} == COVERAGE_ROLES or role in COVERAGE_ROLES},
            },
            "checks": CHECKED,
            "operations": [
                {
                    # The contract's answer once the fuzz has used up the world's VRF pool.
                    "include-path": "/api/network-manager/vpc",
                    "checks": {
                        **CHECKED,
                        "not_a_server_error": {"expected-statuses": ["2xx", "3xx", "4xx", 503]},
                    },
                }
            ],
        }
    )
    return schemathesis.openapi.from_wsgi(url, WSGIHandler(), config=config)


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
def test_bad_input_gets_a_4xx_in_the_error_envelope(case, role, fuzz_world):
    _point_at_real_objects(case, fuzz_world)
    headers = {}
    if _valid(case, ParameterLocation.HEADER):
        headers["Idempotency-Key"] = uuid.uuid4().hex  # a reused key with another body only answers 409
    authorization = fuzz_world.headers[role]()
    if authorization:
        headers["Authorization"] = authorization
    case.call_and_validate(headers=headers)
