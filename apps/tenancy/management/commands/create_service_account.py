"""``create_service_account --name NAME (--platform-role ROLE | --project PROJECT_ID --role ROLE)``

Prints one JSON line with the client id and the secret; the secret is shown once.
"""

import json
import uuid

from django.core.management.base import BaseCommand, CommandError

from apps.core.errors import Conflict, ValidationFailed
from apps.tenancy import services
from apps.tenancy.models import Project
from apps.tenancy.principal import OPERATOR_CLI


class Command(BaseCommand):
    help = "Create a service account and print its credentials as one JSON line."

    def add_arguments(self, parser):
        parser.add_argument("--name", required=True)
        scope = parser.add_mutually_exclusive_group(required=True)
        scope.add_argument("--platform-role", choices=["platform_admin", "platform_integration"])
        scope.add_argument("--project", help="project UUID, or TENANT_ID/PROJECT_ID (CCP ids)")
        parser.add_argument("--role", choices=["project_admin", "viewer"])

    def handle(self, *args, name, platform_role=None, project=None, role=None, **options):
        try:
            if platform_role:
                issued = services.create_platform_service_account(OPERATOR_CLI, name=name, role=platform_role)
            else:
                if not role:
                    raise CommandError("--role is required with --project")
                issued = services.create_service_account(
                    OPERATOR_CLI, self._project(project), name=name, role=role
                )
        except (ValidationFailed, Conflict) as exc:  # a full project, a suspended tenant
            raise CommandError(f"{exc.message} {exc.details or ''}".strip()) from exc
        self.stdout.write(
            json.dumps({"client_id": issued.account.client_id, "client_secret": issued.client_secret})
        )

    @staticmethod
    def _project(value: str) -> Project:
        projects = Project.objects.select_related("tenant")
        try:
            matches = list(projects.filter(pk=uuid.UUID(value)))
        except ValueError:
            if "/" in value:
                tenant_id, project_id = value.split("/", 1)
                matches = list(projects.filter(tenant__tenant_id=tenant_id, project_id=project_id))
            else:
                matches = list(projects.filter(project_id=value)[:2])
        if not matches:
            raise CommandError(f"no project {value!r}")
        if len(matches) > 1:
            raise CommandError(f"project id {value!r} exists in several tenants; use TENANT_ID/PROJECT_ID")
        return matches[0]
