"""What other apps (the runtime) read of a project's secrets."""

from __future__ import annotations

from apps.access.models import ProjectSecret
from apps.core import secrets


def project_secret_names(project_id) -> set[str]:
    return set(ProjectSecret.objects.filter(project_id=project_id).values_list("name", flat=True))


def project_secret_value(project_id, name: str) -> str | None:
    """For the node agent's fetch only; never for an answer to a person."""
    secret = ProjectSecret.objects.filter(project_id=project_id, name=name).first()
    return secrets.read_named(secret.secret_path if secret else None)
