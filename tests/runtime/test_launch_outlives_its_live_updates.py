"""A launch whose live updates cannot go out still answers 202. Apart from
test_launch_api.py, whose tests share a fleet made once per module in a transaction
this committing test would run inside."""

from __future__ import annotations

import pytest

from apps.runtime.models import AppInstance
from tests.support.instances import agent_finishes, ask_launch
from tests.support.processes import free_port


@pytest.mark.django_db(transaction=True)
def test_a_launch_answers_202_when_its_live_updates_cannot_go_out(
    api, settings, caplog, allocator, project, jupyterlab, active_allocation
):
    # The channel layer's Redis is not there: the launch committed before its live
    # updates and the agent's wake-up were sent, and a 503 now would be retried.
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "apps.core.redis_pools.RedisChannelLayer",
            "CONFIG": {"hosts": [f"redis://127.0.0.1:{free_port()}/0"]},
        }
    }
    api.force_login(allocator)
    response = ask_launch(api, project, active_allocation)
    assert response.status_code == 202, response.content
    assert "in on_commit()" in caplog.text
    # The agent's next poll finds the task all the same.
    instance = AppInstance.objects.get(pk=response.json()["instance_id"])
    agent_finishes(instance)
    assert instance.state == "running"
    assert AppInstance.objects.filter(project=project).count() == 1
