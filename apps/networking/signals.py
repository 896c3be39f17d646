"""A deleted tenant's VRFs go back to the pool, clean."""

from django.db.models.signals import pre_delete
from django.dispatch import receiver

from apps.networking import services
from apps.tenancy.models import Tenant


@receiver(pre_delete, sender=Tenant, dispatch_uid="networking.release_tenant_networks")
def release_tenant_networks(sender, instance, **kwargs):
    services.release_tenant_networks(instance)
