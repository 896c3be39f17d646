"""Access lost, secrets rotated: when a user's roles or account change, the instances
they could open before and cannot now run with new secrets
(``services.rotate_lost_access``; sharing changes go through ``services.share``).
Service accounts open no app (UI sessions are for people), so revoking one changes
no app's secrets."""

from django.contrib.auth import get_user_model
from django.db.models.signals import post_delete, post_save, pre_delete, pre_save
from django.dispatch import receiver

from apps.runtime import services
from apps.tenancy.models import Membership

_SNAPSHOT = "_gpuaas_access_before"


@receiver([pre_save, pre_delete], sender=Membership)
def _membership_changing(sender, instance, raw=False, **kwargs):
    if not raw and not instance._state.adding:  # a new role takes nothing away
        setattr(instance, _SNAPSHOT, services.access_snapshot([instance.user_id]))


@receiver([post_save, post_delete], sender=Membership)
def _membership_changed(sender, instance, **kwargs):
    before = instance.__dict__.pop(_SNAPSHOT, None)
    if before is not None:
        services.rotate_lost_access(before, f"{instance} changed or was removed")


@receiver(pre_save, sender=get_user_model())
def _user_changing(sender, instance, raw=False, update_fields=None, **kwargs):
    # Of a user's own fields only deactivation takes access away (``sessions.decide``).
    deactivating = not instance.is_active and (update_fields is None or "is_active" in update_fields)
    if deactivating and not raw and not instance._state.adding:
        setattr(instance, _SNAPSHOT, services.access_snapshot([instance.pk]))


@receiver(post_save, sender=get_user_model())
def _user_changed(sender, instance, **kwargs):
    before = instance.__dict__.pop(_SNAPSHOT, None)
    if before is not None:
        services.rotate_lost_access(before, f"{instance.get_username()} was deactivated")
