"""The agent's loop: heartbeat every few seconds with the workloads still
alive, long-poll tasks, run each in order and report how it went.

A workload that dies simply drops out of the heartbeat's ``running`` list; the
platform marks its instance failed. Stopping the agent (SIGTERM, SIGINT) stops
no workload: they outlive agent restarts, and the next agent reports them again.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from pathlib import Path

from node_agent import access, credentials, executors
from node_agent.client import AgentClient, ApiError, Unauthorized
from node_agent.executors.base import Executor, TaskFailed
from node_agent.logs import LogShipper
from node_agent.telemetry import Telemetry
from node_agent.terminal import TerminalRelay

logger = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 10.0
POLL_SECONDS = 25.0
# Keys added or removed on the platform reach the node within this (the contract: 10 s).
ACCESS_SECONDS = 2.0
EXIT_UNAUTHORIZED = 2


class Runner:
    def __init__(
        self,
        client: AgentClient,
        executor: Executor,
        *,
        heartbeat_seconds: float = HEARTBEAT_SECONDS,
        poll_seconds: float = POLL_SECONDS,
        telemetry: Telemetry | None = None,
        ssh=None,
        access_seconds: float = ACCESS_SECONDS,
        logs: LogShipper | None = None,
    ):
        self.client, self.executor, self.telemetry, self.logs = client, executor, telemetry, logs
        self.ssh, self.access_seconds = ssh, access_seconds
        self._access_reported: dict | None = None
        self.heartbeat_seconds, self.poll_seconds = heartbeat_seconds, poll_seconds
        self.stopping = threading.Event()
        self.exit_code = 0
        # Held while a batch of claimed tasks runs, so shutdown lets it finish and report.
        self._busy = threading.Lock()
        # A heartbeat's running list and a task report must not cross: a list taken
        # before a start finished, arriving after its report, would make the platform
        # take the just-started instance for one that died.
        self._reporting = threading.Lock()

    def run(self) -> int:
        if self.ssh is not None:
            # Before the first heartbeat, which ends the pipeline's agent step: an ACTIVE
            # allocation's runtime user exists and its SSH server is reported.
            self._guarded(self._reconcile_access)
        # First of all: the platform learns which workloads survived before any new task.
        self._guarded(self._heartbeat)
        loops = [
            threading.Thread(target=self._heartbeats, name="heartbeat", daemon=True),
            threading.Thread(target=self._tasks, name="tasks", daemon=True),
        ]
        if self.telemetry is not None:
            loops.append(
                threading.Thread(
                    target=self.telemetry.loop,
                    args=(self.stopping, self._guarded),
                    name="telemetry",
                    daemon=True,
                )
            )
        if self.logs is not None:
            loops.append(
                threading.Thread(
                    target=self.logs.loop, args=(self.stopping, self._guarded), name="logs", daemon=True
                )
            )
        if self.ssh is not None:
            loops.append(threading.Thread(target=self._access, name="access", daemon=True))
        for loop in loops:
            loop.start()
        while not self.stopping.wait(1.0):
            pass
        with self._busy:
            logger.info("agent stopped; workloads keep running")
        return self.exit_code

    def _heartbeats(self) -> None:
        while not self.stopping.wait(self.heartbeat_seconds):
            self._guarded(self._heartbeat)

    def _heartbeat(self) -> None:
        with self._reporting:
            self.client.heartbeat(self.executor.running())

    def _access(self) -> None:
        while not self.stopping.wait(self.access_seconds):
            self._guarded(self._reconcile_access)

    def _reconcile_access(self) -> None:
        """The runtime user's keys as the platform has them; a report when the node's
        side changed (or the platform has none, as after a release)."""
        desired = self.client.access()
        try:
            user, applied = self.ssh.apply(desired["user"], desired["keys"])
        except access.AccessError as exc:
            logger.error("ssh access: %s", exc)
            return
        if not user:
            return  # no runtime user was ever made here: nothing to report
        report = {"user": user, "port": self.ssh.port, "host_keys": self.ssh.host_keys(), "applied": applied}
        if report != self._access_reported or not desired.get("reported"):
            self.client.report_access(report)
            self._access_reported = report

    def _tasks(self) -> None:
        while not self.stopping.is_set():
            self._guarded(self._next_tasks)

    def _next_tasks(self) -> None:
        tasks = self.client.fetch_tasks(self.poll_seconds)
        with self._busy:
            for task in tasks:  # in order: a stop queued after a start must come after it
                self._execute(task)

    def _execute(self, task: dict) -> None:
        logger.info("task %s: %s instance %s", task["id"], task["action"], task["instance_id"])
        began = time.monotonic()
        endpoints, error = [], None
        try:
            endpoints = self._perform(task)
        except TaskFailed as exc:
            error = str(exc)
        except Unauthorized:
            raise
        except Exception as exc:  # a bug here must still answer the task, or it stays claimed forever
            logger.exception("task %s: the agent failed", task["id"])
            error = f"the node agent failed ({type(exc).__name__}); see its log"
        with self._reporting:
            self.client.report(task["id"], error=error, endpoints=endpoints)
        outcome = f"failed: {error}" if error else "done"
        logger.info("task %s %s in %.1f s", task["id"], outcome, time.monotonic() - began)

    def _perform(self, task: dict) -> list[dict]:
        action, spec = task["action"], task["spec"]
        if action == "start":
            if not task.get("address"):
                raise TaskFailed("the platform has no address for this node's agent; enroll the agent again")
            proxies = task.get("proxy_addresses") or []
            secrets = self._secrets(task)
            if self.logs is not None:  # before it starts: apps print their token as they start
                self.logs.mask(task["instance_id"], secrets.values())
            return self.executor.start(spec, secrets, task["address"], proxies)
        if action == "stop":
            self.executor.stop(spec)
        elif action == "remove":
            self.executor.remove(spec)
        else:
            raise TaskFailed(f"this node agent does not know the action {action!r}")
        return []

    def _secrets(self, task: dict) -> dict[str, str]:
        if not task["spec"].get("secrets"):
            return {}
        try:
            return self.client.secrets(task["id"])
        except Unauthorized:
            raise
        except ApiError as exc:
            raise TaskFailed(f"the agent could not fetch the task's secrets ({exc.code})") from None

    def _guarded(self, work) -> None:
        """One turn of a loop; what goes wrong is logged and the loop goes on,
        except a refused credential, which no retry will fix."""
        try:
            work()
        except Unauthorized:
            logger.error(
                "the platform does not accept this node's credential; to enroll again, remove "
                "the saved credential and start the agent with a new bootstrap token"
            )
            self.exit_code = EXIT_UNAUTHORIZED
            self.stopping.set()
        except ApiError as exc:
            logger.error("the platform refused a request: %s", exc)
            time.sleep(1.0)
        except Exception:
            logger.exception("agent loop error")
            time.sleep(1.0)


def run_agent(
    *,
    url: str,
    node: str,
    state_dir: Path,
    executor: str = "auto",
    bootstrap_token: str | None = None,
    heartbeat_seconds: float = HEARTBEAT_SECONDS,
    metrics_port: int = 9400,
    ssh: str = "off",
    terminal_user: str = "runtime",
) -> int:
    """Enroll or load the credential, then run until SIGTERM/SIGINT; the exit code."""
    logging.getLogger("httpx").setLevel(logging.WARNING)  # it logs every long-poll at INFO
    state_dir = Path(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    client = AgentClient(url)
    try:
        client.credential = credentials.obtain(client, state_dir, node, bootstrap_token)
    except (credentials.NotEnrolled, ApiError) as exc:
        logger.error("cannot enroll %s: %s", node, exc)
        return EXIT_UNAUTHORIZED
    chosen = executors.create(executor, state_dir)
    telemetry = Telemetry(client, node, lambda: bool(chosen.running()), port=metrics_port)
    host = access.create(ssh, state_dir)
    if host is not None:
        try:
            host.start()
        except access.AccessError as exc:
            logger.error("no SSH access to this node: %s", exc)
            host = None
    runner = Runner(
        client,
        chosen,
        heartbeat_seconds=heartbeat_seconds,
        telemetry=telemetry,
        ssh=host,
        logs=LogShipper(client, chosen.outputs),
    )
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: runner.stopping.set())
    logger.info("node agent for %s: %s executor, platform %s", node, chosen.name, url)
    terminals = TerminalRelay(url, client.credential, terminal_user).start()
    try:
        return runner.run()
    finally:
        terminals.stop()
        if host is not None:
            host.stop()
        client.close()
