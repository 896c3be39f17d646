"""What the runtime keeps of an instance's past, and of a project's deleted instances.

A project writes these rows again and again (launch, stop, start, decommission), and so
do its nodes' agents, which the nodes' root users control: an app stopped and started
in a loop, or apps launched and decommissioned in one, must not grow the tables for
ever. The newest are kept; each new row trims the rest (``bounds.keep_newest``), as
``agents.append_logs`` does for an instance's log lines.
"""

from __future__ import annotations

from django.contrib.contenttypes.models import ContentType
from django.db.models.signals import post_delete
from django.dispatch import receiver
from guardian.models import UserObjectPermission

from apps.core import bounds
from apps.runtime.models import AgentTask, AppInstance, InstanceEvent, Operation

EVENTS_KEPT = 1000  # an instance's timeline
OPERATIONS_KEPT = 100  # an older one answers 404 at GET /api/v1/operations/{id}
FINISHED_TASKS_KEPT = 100  # an instance's agent tasks that are done; pending and claimed ones stay
DELETED_KEPT = 100  # a project's deleted instances, each with all it had


def event_written(instance: AppInstance) -> None:
    bounds.keep_newest(InstanceEvent.objects.filter(instance=instance), EVENTS_KEPT)


def operation_started(instance: AppInstance) -> None:
    bounds.keep_newest(Operation.objects.filter(instance=instance), OPERATIONS_KEPT, by="created_at")
    finished = AgentTask.objects.filter(
        instance=instance, status__in=(AgentTask.Status.SUCCEEDED, AgentTask.Status.FAILED)
    )
    bounds.keep_newest(finished, FINISHED_TASKS_KEPT, by="created_at")


def instance_deleted(instance: AppInstance) -> None:
    deleted = AppInstance.objects.filter(project_id=instance.project_id, state=AppInstance.State.DELETED)
    bounds.keep_newest(deleted, DELETED_KEPT, by="updated_at")


@receiver(post_delete, sender=AppInstance)
def _forget_shares(sender, instance, **kwargs):
    """The users it was shared with (django-guardian's rows name it by id, with no foreign key)."""
    UserObjectPermission.objects.filter(
        content_type=ContentType.objects.get_for_model(AppInstance), object_pk=str(instance.pk)
    ).delete()
