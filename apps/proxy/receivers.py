"""Ends proxy sessions when the platform's own decision changes: logout, a
membership or account change (the instance side is called by the runtime)."""

from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_out
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from apps.proxy import sessions
from apps.tenancy.models import Membership


@receiver(user_logged_out)
def _logged_out(sender, request, user, **kwargs):
    if user is not None:
        sessions.end_platform_session(getattr(request.session, "session_key", None), user.pk)


@receiver([post_save, post_delete], sender=Membership)
def _membership_changed(sender, instance, **kwargs):
    sessions.invalidate_user(instance.user_id)


@receiver(post_save, sender=get_user_model())
def _user_changed(sender, instance, created, **kwargs):
    if not created:
        sessions.invalidate_user(instance.pk)
