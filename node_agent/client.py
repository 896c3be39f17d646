"""The agent's HTTP client for ``/api/agent/v1/``.

Network errors and 5xx answers are retried with capped exponential backoff and
jitter: the platform restarting must not lose a task report or crash the agent.
4xx answers are the agent's own fault and raise at once. Logs name the method,
path and outcome only: never a header (the credential) or a body (secrets).
"""

from __future__ import annotations

import logging
import random
import time

import httpx

logger = logging.getLogger(__name__)

BACKOFF_FIRST_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 30.0


class ApiError(Exception):
    """The platform refused a request (4xx); retrying the same request will not help."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code = status, code


class Unauthorized(ApiError):
    """The node credential (or bootstrap token) is not accepted."""


class AgentClient:
    def __init__(self, url: str, credential: str | None = None):
        self._http = httpx.Client(
            base_url=f"{url.rstrip('/')}/api/agent/v1/", timeout=httpx.Timeout(30.0, connect=5.0)
        )
        self.credential = credential

    def close(self) -> None:
        self._http.close()

    def enroll(self, hostname: str, bootstrap_token: str) -> str:
        """Spend the one-time bootstrap token; returns the node's own credential."""
        body = self._call(
            "POST",
            "enroll",
            json={"hostname": hostname, "bootstrap_token": bootstrap_token},
            authenticated=False,
        )
        return body["credential"]

    def heartbeat(self, running: list[str]) -> None:
        self._call("POST", "heartbeat", json={"running": running})

    def telemetry(
        self,
        *,
        readings: list[dict],
        xids: list[dict],
        exporter_port: int | None,
        simulated: bool,
        node: dict | None = None,
    ) -> dict:
        """GPU readings, XID errors and the node's own readings (``cpu_utilization``,
        ``memory_utilization``); answers how the platform wants the next report."""
        body = {**(node or {}), "readings": readings, "xids": xids, "simulated": simulated}
        if exporter_port:
            body["exporter_port"] = exporter_port
        return self._call("POST", "telemetry", json=body)

    def logs(self, instance_id: str, lines: list[str], *, dropped: int = 0) -> None:
        """New lines of a workload's output, oldest first; ``dropped``: lines skipped before them."""
        self._call("POST", f"instances/{instance_id}/logs", json={"lines": lines, "dropped": dropped})

    def fetch_tasks(self, wait: float) -> list[dict]:
        """Pending tasks, waiting up to ``wait`` seconds on the platform's side for one."""
        body = self._call("GET", "tasks", params={"wait": wait}, timeout=wait + 15.0)
        return body["tasks"]

    def access(self) -> dict:
        """The runtime user and the keys it should hold."""
        return self._call("GET", "access")

    def report_access(self, report: dict) -> None:
        self._call("POST", "access", json=report)

    def secrets(self, task_id: str) -> dict[str, str]:
        return self._call("GET", f"tasks/{task_id}/secrets")

    def report(self, task_id: str, *, error: str | None = None, endpoints: list[dict] = ()) -> None:
        """``error`` None reports success."""
        body = (
            {"status": "succeeded", "endpoints": list(endpoints)}
            if error is None
            else {"status": "failed", "error": error[:4000]}
        )
        self._call("POST", f"tasks/{task_id}/report", json=body)

    def _call(self, method: str, path: str, *, authenticated: bool = True, **kwargs):
        headers = {"Authorization": f"Node {self.credential}"} if authenticated else {}
        attempt = 0
        while True:
            try:
                response = self._http.request(method, path, headers=headers, **kwargs)
            except httpx.TransportError as exc:
                problem = type(exc).__name__
            else:
                if response.status_code < 400:
                    return response.json() if response.content else None
                if response.status_code < 500:
                    raise _api_error(response)
                problem = f"HTTP {response.status_code}"
            delay = _backoff(attempt)
            logger.warning(
                "agent API %s %s failed (%s); retrying in %.1f s", method, _route(path), problem, delay
            )
            time.sleep(delay)
            attempt += 1


def _backoff(attempt: int) -> float:
    return min(BACKOFF_MAX_SECONDS, BACKOFF_FIRST_SECONDS * 2**attempt) * random.uniform(0.5, 1.0)


def _route(path: str) -> str:
    """The path without task or instance ids, so retry logs group by endpoint."""
    for collection in ("tasks/", "instances/"):
        if path.startswith(collection):
            return collection + "{id}/" + path.rsplit("/", 1)[1]
    return path


def _api_error(response: httpx.Response) -> ApiError:
    try:
        error = response.json()["error"]
        code, message = error["code"], error["message"]
    except (ValueError, KeyError, TypeError):
        code, message = "error", response.reason_phrase
    kind = Unauthorized if response.status_code == 401 else ApiError
    return kind(response.status_code, code, message)
