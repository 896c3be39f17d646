"""App instances as a test user launches them: through the services the portal's pages
call, or through the platform API while a real node agent (tests/support/agent.py) runs
them."""

from __future__ import annotations

from apps.runtime import agents, services
from apps.runtime.models import AppInstance
from apps.tenancy import principal as principals
from tests.support.processes import wait_for


def launched(user, project, allocation, slug="jupyterlab", **parameters) -> AppInstance:
    operation = services.launch(
        principals.for_user(user), project, app_slug=slug, allocation_id=allocation.pk, parameters=parameters
    )
    return operation.instance


def ask_launch(api, project, allocation, **body):
    """``POST`` a launch of JupyterLab (or ``body``'s app and parameters) on ``allocation``
    as ``api``'s caller; the response."""
    payload = {"app": "jupyterlab", "allocation_id": str(allocation.pk), **body}
    return api.post(f"/api/v1/projects/{project.pk}/app-instances", payload, format="json")


def agent_finishes(instance, *, succeeded=True, error="", endpoint="web") -> AppInstance:
    """The node agent does the instance's pending task, through the services its API
    calls, and reports how it went: on success, where ``endpoint`` listens."""
    node = instance.allocation.node
    [task] = agents.claim_tasks(node)
    endpoints = [{"name": endpoint, "host": "127.0.0.1", "port": 41234}] if succeeded else []
    agents.report_task(node, task.pk, succeeded=succeeded, error=error, endpoints=endpoints)
    instance.refresh_from_db()
    return instance


def fill(user, allocation, name: str) -> AppInstance:
    """An 8-GPU vLLM server on the allocation's 8-GPU node, running (the ``vllm`` app)."""
    instance = services.launch(
        principals.for_user(user),
        allocation.project,
        app_slug="vllm-openai",
        allocation_id=allocation.pk,
        parameters={"tensor_parallel": 8},
        name=name,
    ).instance
    agent_finishes(instance, endpoint="api")
    return instance


START_TIMEOUT = 120.0  # JupyterLab is ready in ~3-5 s on an idle machine; CI machines are not idle


class PlatformApi:
    """The platform API as the test user calls it; keeps every answer's body."""

    def __init__(self, api, project):
        self.api, self.base = api, f"/api/v1/projects/{project.pk}/app-instances"
        self.answers: list[bytes] = []

    def _keep(self, response):
        self.answers.append(response.content)
        return response

    def launch(self, allocation) -> str:
        body = {"app": "jupyterlab", "allocation_id": str(allocation.pk)}
        response = self._keep(self.api.post(self.base, body, format="json"))
        assert response.status_code == 202, response.content
        return response.json()["instance_id"]

    def instance(self, instance_id) -> dict:
        return self._keep(self.api.get(f"{self.base}/{instance_id}")).json()

    def act(self, instance_id, action: str) -> None:
        url = f"{self.base}/{instance_id}"
        response = self.api.delete(url) if action == "delete" else self.api.post(f"{url}/{action}")
        assert self._keep(response).status_code == 202, response.content

    def events(self, instance_id) -> list[dict]:
        return list(reversed(self._keep(self.api.get(f"{self.base}/{instance_id}/events")).json()["results"]))

    def wait_state(self, instance_id, state: str, timeout: float = 30.0) -> dict:
        seen = []

        def reached():
            detail = self.instance(instance_id)
            seen.append(detail["state"])
            return detail if detail["state"] == state else None

        try:
            return wait_for(reached, timeout=timeout, what=f"state {state}")
        except AssertionError:
            raise AssertionError(
                f"never {state}; last states {seen[-3:]}: "
                f"{AppInstance.objects.get(pk=instance_id).state_reason}"
            ) from None
