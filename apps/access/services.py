"""Secrets custody for projects: access credentials (SSH key pairs the platform makes)
and project secrets (values members supply for their apps). Values go to the secrets
store; the records keep names and public halves. Every change is audited."""

from __future__ import annotations

import hashlib
from base64 import b64decode, b64encode
from dataclasses import dataclass

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from django.db import IntegrityError, transaction

from apps.access.models import AccessCredential, ProjectSecret
from apps.core import audit, secrets
from apps.core.errors import Conflict, Forbidden, ValidationFailed
from apps.tenancy import policy
from apps.tenancy.models import Project
from apps.tenancy.principal import Principal
from apps.tenancy.roles import Perm, Role

DEFAULT_PURPOSE = "delivery to the project's app controller"
# What one project may keep: each is a row here and an entry in the secrets store.
MAX_PER_PROJECT = 100


@dataclass
class IssuedCredential:
    credential: AccessCredential
    private_key: str  # OpenSSH format; returned once, at creation


def _key_pair(comment: str) -> tuple[str, str]:
    """(private, public) in OpenSSH formats."""
    key = ed25519.Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return private, f"{public.decode()} {comment}"


def fingerprint(public_key: str) -> str:
    """``SHA256:...`` as ``ssh-keygen -l`` prints it."""
    blob = b64decode(public_key.split()[1])
    return "SHA256:" + b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def create_credential(principal: Principal, project: Project, *, name: str) -> IssuedCredential:
    policy.require(principal, Perm.ACCESS_CREDENTIAL_MANAGE, project)
    _require_room(AccessCredential.objects.filter(project=project), "access credentials")
    private, public = _key_pair(f"gpuaas:{project.project_id}:{name}")
    credential = AccessCredential(
        tenant_id=project.tenant_id,
        project=project,
        name=name,
        public_key=public,
        fingerprint=fingerprint(public),
        created_by=principal.name,
    )
    credential.secret_path = AccessCredential.path_for(credential.pk)
    # Into the store first: a record never names a private key that is not there. A
    # refused insert leaves an unreferenced key under a fresh id, discarded below.
    secrets.store().write(credential.secret_path, private)
    try:
        with transaction.atomic():
            credential.save(force_insert=True)
            audit.record(
                principal,
                "access_credential.create",
                target=credential,
                details={"name": name, "fingerprint": credential.fingerprint},
            )
    except IntegrityError:
        secrets.store().delete(credential.secret_path)
        raise Conflict(f"This project already has an access credential named {name!r}.") from None
    return IssuedCredential(credential, private)


def _require_room(kept, what: str) -> None:
    if kept.count() >= MAX_PER_PROJECT:
        raise Conflict(f"A project keeps at most {MAX_PER_PROJECT} {what}; delete one first.")


def deliver_credential(principal: Principal, credential: AccessCredential, *, purpose: str = "") -> dict:
    """The key pair, to a service account of the credential's project holding
    ``project_admin`` (the project's app controller): nobody else, whatever their role."""
    account = principal.service_account
    if not (
        principal.kind == "service_account"
        and account is not None
        and account.project_id == credential.project_id
        and account.role == Role.PROJECT_ADMIN
        and account.revoked_at is None
    ):
        audit.record(
            principal,
            "access_credential.deliver",
            target=credential,
            outcome=audit.DENIED,
            details={"reason": "only a project_admin service account of this project receives it"},
        )
        raise Forbidden("Only a service account of this project with role project_admin receives the key.")
    private = secrets.store().read(credential.secret_path)
    audit.record(
        principal,
        "access_credential.deliver",
        target=credential,
        details={"purpose": purpose or DEFAULT_PURPOSE, "fingerprint": credential.fingerprint},
    )
    return {"private_key": private, "public_key": credential.public_key}


def delete_credential(principal: Principal, credential: AccessCredential) -> None:
    policy.require(principal, Perm.ACCESS_CREDENTIAL_MANAGE, credential)
    with transaction.atomic():
        audit.record(
            principal,
            "access_credential.delete",
            target=credential,
            details={"name": credential.name, "fingerprint": credential.fingerprint},
        )
        credential.delete()  # its private key goes with it (``secrets.owned_by``)


def put_secret(
    principal: Principal, project: Project, *, name: str, value: str
) -> tuple[ProjectSecret, bool]:
    """Create the project's secret ``name``, or replace its value: (secret, created)."""
    policy.require(principal, Perm.SECRET_MANAGE, project)
    if len(value) > secrets.MAX_VALUE:
        raise ValidationFailed(details={"value": ["At most 64 KiB."]})
    with transaction.atomic():
        secret, created = ProjectSecret.objects.select_for_update().get_or_create(
            project=project,
            name=name,
            defaults={"tenant_id": project.tenant_id, "created_by": principal.name},
        )
        if created:
            _require_room(ProjectSecret.objects.filter(project=project).exclude(pk=secret.pk), "secrets")
            secret.secret_path = ProjectSecret.path_for(secret.pk)
        secrets.store().write(secret.secret_path, value)
        secret.save()  # a replaced value moves updated_at
        audit.record(
            principal,
            "project_secret.create" if created else "project_secret.update",
            target=secret,
            details={"name": name},
        )
    return secret, created


def delete_secret(principal: Principal, secret: ProjectSecret) -> None:
    policy.require(principal, Perm.SECRET_MANAGE, secret)
    with transaction.atomic():
        audit.record(principal, "project_secret.delete", target=secret, details={"name": secret.name})
        secret.delete()
