from __future__ import annotations

from django.core.validators import MinValueValidator
from django.db import models

from apps.core.models import UUIDModel


class Flavor(UUIDModel):
    """A GPU node SKU (``h100-8x``): what a tenant asks for when it allocates."""

    name = models.SlugField(max_length=64, unique=True)
    gpu_model = models.CharField(max_length=64)
    gpus_per_node = models.PositiveSmallIntegerField(validators=[MinValueValidator(1)])
    cpu_cores = models.PositiveSmallIntegerField()
    memory_gb = models.PositiveIntegerField()
    rate_per_node_hour = models.DecimalField(max_digits=10, decimal_places=4, default=0)
    description = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name
