from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from apps.core.models import UUIDModel


class Vrf(UUIDModel):
    """A pre-created tenant VRF in the fabric, with its four VLANs.

    Operators load the pool ahead of time (the firewall needs a manual rule per
    VRF, seed 001 section 4.4.3); onboarding takes one, deleting a tenant gives it back.
    """

    name = models.CharField(max_length=64, unique=True)
    vni = models.PositiveIntegerField("VXLAN VNI", unique=True)
    tenant = models.ForeignKey(
        "tenancy.Tenant", null=True, blank=True, on_delete=models.SET_NULL, related_name="vrfs"
    )
    vpc_id = models.CharField("CCP VPC id", max_length=128, blank=True)
    assigned_at = models.DateTimeField(null=True, blank=True)

    tenant_path = "tenant_id"
    project_path = None
    visible_to_project_members = True

    class Meta:
        ordering = ["name"]
        verbose_name = "VRF"

    def __str__(self):
        return self.name


class Vlan(models.Model):
    class Purpose(models.TextChoices):
        CONTROL_PLANE = "control_plane"
        GPU_WORKER = "gpu_worker"
        LB = "lb"
        RESERVED = "reserved"

    vrf = models.ForeignKey(Vrf, on_delete=models.CASCADE, related_name="vlans", verbose_name="VRF")
    purpose = models.CharField(max_length=16, choices=Purpose.choices)
    vlan_id = models.PositiveSmallIntegerField(
        "VLAN id", unique=True, validators=[MinValueValidator(2), MaxValueValidator(4094)]
    )

    class Meta:
        verbose_name = "VLAN"
        ordering = ["vlan_id"]
        constraints = [models.UniqueConstraint(fields=["vrf", "purpose"], name="vlan_unique_purpose")]

    def __str__(self):
        return f"{self.vrf.name}/{self.purpose}={self.vlan_id}"
