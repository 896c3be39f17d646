"""Demo tenant ``demo`` with project ``demo``; users demo/demo and admin/admin."""

from django.contrib.auth import get_user_model

from apps.tenancy import quotas
from apps.tenancy.models import Membership, Project, Tenant
from apps.tenancy.roles import Role

DEMO_QUOTA = {"gpus": 256, "nodes": 32, "storage_gb": 102400, "app_instances": 256}


def bootstrap(stdout) -> None:
    User = get_user_model()
    tenant, _ = Tenant.objects.get_or_create(
        tenant_id="demo", defaults={"name": "Demo", "realm_name": "demo", "status": Tenant.Status.ACTIVE}
    )
    Project.objects.get_or_create(tenant=tenant, project_id="demo", defaults={"name": "Demo project"})
    quotas.set_quota(tenant, DEMO_QUOTA)
    admin, created = User.objects.get_or_create(
        username="admin", defaults={"is_staff": True, "is_superuser": True}
    )
    if created:
        admin.set_password("admin")
        admin.save()
    demo, created = User.objects.get_or_create(username="demo", defaults={"first_name": "Demo"})
    if created:
        demo.set_password("demo")
        demo.save()
    Membership.objects.get_or_create(user=demo, tenant=tenant, project=None, role=Role.TENANT_ADMIN)
    stdout.write("tenancy: tenant demo, project demo, users demo and admin")
