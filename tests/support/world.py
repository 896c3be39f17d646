"""Two tenants, their projects and a caller in every role, for role matrices.

Tenant A (``acme``) has projects A1 (``cell-1``) and A2 (``cell-2``); tenant B
(``globex``) has project B1 (``g-1``). Callers sign in the way they do in
production: portal users through the session, a project service account with a
platform-issued bearer token, CCP's integration with a JWT from a trusted issuer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from apps.access import services as access
from apps.tenancy import principal as principals
from apps.tenancy import services
from apps.tenancy.models import Membership, Project, ServiceAccount, Tenant
from tests.factories import ProjectFactory, TenantFactory, UserFactory
from tests.support.members import member

INTEGRATION_ROLE = "GPUaaS Platform Integration"
INTEGRATION_NAME = "ccp-integration"

# Every caller of the matrices, in the order of the expected-status tuples.
CALLERS = (
    "tenant_admin",  # tenant admin of A
    "project_admin",  # project admin of A1
    "viewer",  # viewer of A1
    "billing_admin",  # billing admin of A
    "other_tenant_admin",  # tenant admin of B
    "other_project_sa",  # project_admin service account of A2
    "platform_admin",
    "platform_integration",  # CCP
)


@dataclass
class World:
    tenant: Tenant
    project: Project  # A1
    other_project: Project  # A2
    other_tenant: Tenant
    other_tenant_project: Project  # B1
    users: dict = field(default_factory=dict)
    service_account: ServiceAccount | None = None  # of A2
    service_account_secret: str = ""
    target_membership: Membership | None = None  # a viewer of A1, for DELETE
    target_service_account: ServiceAccount | None = None  # of A1, for GET/DELETE
    candidate: object = None  # a user of tenant A (viewer of A2) to add to A1
    target_credential: object = None  # an access credential of A1
    target_secret: object = None  # a project secret of A1
    allocation: object = None  # of A1, for the access endpoints (``with_allocation``)
    target_key: object = None  # a user key on it, added by A1's project admin
    target_subscription: object = None  # tenant A's alert subscription (``with_alert_subscription``)


def build_world() -> World:
    tenant = TenantFactory(tenant_id="acme", name="Acme")
    other_tenant = TenantFactory(tenant_id="globex", name="Globex")
    world = World(
        tenant=tenant,
        project=ProjectFactory(tenant=tenant, project_id="cell-1", name="Cell 1"),
        other_project=ProjectFactory(tenant=tenant, project_id="cell-2", name="Cell 2"),
        other_tenant=other_tenant,
        other_tenant_project=ProjectFactory(tenant=other_tenant, project_id="g-1", name="Globex 1"),
    )
    world.users = {
        "tenant_admin": member("tenant_admin", tenant=tenant),
        "project_admin": member("project_admin", tenant=tenant, project=world.project),
        "viewer": member("viewer", tenant=tenant, project=world.project),
        "billing_admin": member("billing_admin", tenant=tenant),
        "other_tenant_admin": member("tenant_admin", tenant=other_tenant),
        "platform_admin": UserFactory(is_superuser=True, is_staff=True),
    }
    operator = principals.for_user(world.users["platform_admin"])
    issued = services.create_service_account(
        operator, world.other_project, name="a2-bot", role="project_admin"
    )
    world.service_account, world.service_account_secret = issued.account, issued.client_secret
    world.target_service_account = services.create_service_account(
        operator, world.project, name="a1-bot", role="viewer"
    ).account
    target_user = member("viewer", tenant=tenant, project=world.project)
    world.target_membership = Membership.objects.get(user=target_user)
    world.candidate = member("viewer", tenant=tenant, project=world.other_project)
    world.target_credential = access.create_credential(operator, world.project, name="a1-key").credential
    world.target_secret, _ = access.put_secret(operator, world.project, name="a1-secret", value="s3cr3t")
    return world


def with_allocation(world: World) -> World:
    """An ACTIVE allocation of A1 holding one user key of its project admin."""
    from apps.access.models import AuthorizedKey
    from tests.factories import AllocationFactory

    world.allocation = AllocationFactory(project=world.project)
    admin = world.users["project_admin"]
    world.target_key = AuthorizedKey.objects.create(
        allocation=world.allocation,
        public_key=MATRIX_KEYS[0],
        fingerprint="SHA256:matrix-target",
        owner=admin.get_username(),
        owner_user=admin,
    )
    return world


ALERT_RECEIVER = "http://127.0.0.1:9/alerts"  # nothing listens: deliveries are only queued


def with_alert_subscription(world: World) -> World:
    """Tenant A's own receiver of its alerts (needs ``settings.ALERT_PRIVATE_URLS``)."""
    from apps.monitoring.alerts import subscriptions

    operator = principals.for_user(world.users["platform_admin"])
    world.target_subscription = subscriptions.subscribe(
        operator, tenant_id=world.tenant.tenant_id, url=ALERT_RECEIVER, secret="a-receiver-secret"
    )
    return world


# Two valid ed25519 public keys: one on the world's allocation, one the callers add.
MATRIX_KEYS = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGOpDC+It32rRl5w9qtLoxuR5mvU8+8CGFrnRhhFfLDF",
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIc1Dh0v6K0ckNbTc4wsXKW8wOpN8m2ufmHvuOZ7m2kq",
)


def sign_in(api, world: World, caller: str, issuer=None) -> str:
    """Authenticate ``api`` as ``caller``; returns the actor name audit events carry."""
    if caller in world.users:
        user = world.users[caller]
        api.force_login(user)
        return user.get_username()
    if caller == "other_project_sa":
        token, _ = services.issue_token(world.service_account.client_id, world.service_account_secret)
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        return f"sa:{world.service_account.name}"
    if caller == "platform_integration":
        assert issuer is not None, "the platform integration signs in with a token from ccp_issuer"
        token = issuer.token({"roles": [INTEGRATION_ROLE], "preferred_username": INTEGRATION_NAME})
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        return INTEGRATION_NAME
    raise ValueError(caller)
