"""The proxy follows the platform: its sessions end at logout, at a membership or
account change and when their tenant is suspended, and its routes follow the
runtime's instances (launched, moved, shared), which the runtime signals since it
sits below the proxy."""

from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from apps.proxy import exposure, routes, sessions
from apps.runtime import selectors as instances
from apps.runtime import signals as runtime
from apps.runtime.models import AppInstance
from apps.tenancy.models import Membership
from apps.tenancy.services import tenant_suspension_changed


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


@receiver(runtime.instance_launched)
def _instance_launched(sender, instance, manifest, **kwargs):
    """How its UI is shown, kept on the instance with the reason, then its routes."""
    decision = exposure.decide(manifest)
    instance.ui_mode, instance.ui_mode_reason = decision.mode, decision.reason
    sender.objects.filter(pk=instance.pk).update(ui_mode=decision.mode, ui_mode_reason=decision.reason)
    routes.plan(instance, manifest, decision.route_mode)


@receiver(runtime.instance_moved)
def _instance_moved(sender, instance, **kwargs):
    routes.sync(instance)


@receiver(runtime.instance_access_changed)
def _instance_access_changed(sender, instance, **kwargs):
    transaction.on_commit(lambda: sessions.invalidate_instance(instance.pk))


@receiver(tenant_suspension_changed)
def _tenant_suspension_changed(sender, tenant, **kwargs):
    """Every decision about the tenant's apps is made again at its next request, and
    open WebSockets at their next re-check: refused while it is suspended."""
    live = instances.instances().filter(tenant=tenant).exclude(state=AppInstance.State.DELETED)
    ids = list(live.values_list("pk", flat=True))
    transaction.on_commit(lambda: [sessions.invalidate_instance(pk) for pk in ids])
