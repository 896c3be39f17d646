"""A new allocation gets the profile keys of the people who may manage it."""

from __future__ import annotations

from django.db.models.signals import post_save
from django.dispatch import receiver

from apps.access import services
from apps.allocations.models import Allocation


@receiver(post_save, sender=Allocation, dispatch_uid="access.seed_profile_keys")
def seed_profile_keys(sender, instance: Allocation, created: bool, raw: bool = False, **kwargs):
    if created and not raw:
        services.seed_profile_keys(instance)
