"""Processes a test or a benchmark starts and stops for real: the portal under
``manage.py serve``, a private ``redis-server``, and a TCP path to PostgreSQL that can
be cut (a database that crashed, as its clients see it), and a RabbitMQ virtual host."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent.parent

# What production mode needs beside its database and Redis (the test settings' own
# values stay out of the subprocess: it reads gpuaas.settings).
PRODUCTION_ENV = {
    "DJANGO_SETTINGS_MODULE": "gpuaas.settings",
    "GPUAAS_DEBUG": "false",
    "GPUAAS_HTTPS": "false",
    "GPUAAS_ALLOWED_HOSTS": "127.0.0.1",
    "GPUAAS_PATH_ROUTES": "accept-risk",
    "GPUAAS_CELERY_EAGER": "false",
    "GPUAAS_DB_POOL_TIMEOUT": "",  # the shipped default, not the test settings' patience
    "GPUAAS_LOG_FORMAT": "json",  # log lines in the process's output (its log_path), as in the image
}


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on, below the kernel's ephemeral range.

    The kernel hands out ephemeral ports to every process's outgoing connection and
    ``bind(0)``: a port picked from that range could be taken by another test's client
    or server between the pick and this one's bind, and on a busy CI host one was (a
    benchmark then spoke to a server that was not its own, which went away)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(1000):
        port = random.randrange(FIRST_PICKED_PORT, low)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port between {FIRST_PICKED_PORT} and {low}")


# Above the well-known and the usual fixed service ports (PostgreSQL, Redis, 8000, 9000).
FIRST_PICKED_PORT = 20000


def terminate(process: subprocess.Popen, timeout: float) -> None:
    """Asks ``process`` to end (SIGTERM) if it still runs, and kills it if it has not
    within ``timeout`` seconds."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_for(predicate, *, timeout: float = 60.0, what: str = "condition", interval: float = 0.2):
    """``predicate()``'s first true value, asked every ``interval`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"{what} not reached within {timeout:g} s")


class Background:
    """A command in its own session (process group), output to ``log_path``;
    ``stop`` ends the whole group: the command and every child it started."""

    def __init__(self, command: list[str], env: dict[str, str], log_path: Path):
        self.command, self.env, self.log_path = command, env, log_path
        self._start("wb")

    def _start(self, mode: str) -> None:
        self.log = open(self.log_path, mode)  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            self.command,
            cwd=ROOT,
            env={**os.environ, **self.env},
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def restart(self) -> None:
        """Stopped (if it runs) and started again, its output appended to the same log."""
        self.stop()
        self._start("ab")

    @property
    def pgid(self) -> int:
        return self.process.pid

    def check_alive(self, what: str) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(f"{what} exited with {self.process.returncode}; see {self.log_path}")

    def stop(self, timeout: float = 15) -> None:
        descendants = self._descendants()
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        # Supervisord gives each program a process group of its own: a worker or beat that
        # outlived a supervisor killed on a deadline would go on working on the test
        # database, beside the tests that come after on this xdist worker.
        for leftover in descendants:
            with contextlib.suppress(psutil.NoSuchProcess):
                leftover.kill()
        psutil.wait_procs(descendants, timeout=10)
        if not self.log.closed:
            self.log.close()

    def _descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []


class Server(Background):
    """``manage.py serve`` (uvicorn; ``workers`` processes) on 127.0.0.1:``port``."""

    def __init__(self, port: int, env: dict[str, str], workers: int, log_path: Path):
        self.port, self.url = port, f"http://127.0.0.1:{port}"
        command = [sys.executable, "manage.py", "serve", "--host", "127.0.0.1", "--port", str(port)]
        if workers > 1:
            command += ["--workers", str(workers)]
        super().__init__(command, env, log_path)

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive("server")
            try:
                if self._listens() and httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"server not ready after {timeout:.0f} s; see {self.log_path}")

    def _listens(self) -> bool:
        """Whether the socket listening on the port is this server's own, not another
        test's server that took the port first (this one then fails to bind and exits)."""
        with contextlib.suppress(psutil.NoSuchProcess):
            for process in (psutil.Process(self.process.pid), *self._descendants()):
                for connection in process.net_connections("tcp"):
                    if connection.status == psutil.CONN_LISTEN and connection.laddr.port == self.port:
                        return True
        return False


def celery_command(subcommand: str, *options: str) -> list[str]:
    """``celery -A gpuaas <subcommand>`` under this interpreter, logging warnings and worse."""
    return [sys.executable, "-m", "celery", "-A", "gpuaas", subcommand, "--loglevel", "WARNING", *options]


class CeleryWorker(Background):
    """``celery -A gpuaas worker`` with ``concurrency`` slots of ``pool`` (prefork,
    threads), consuming ``queue``; named ``name@<host>``."""

    def __init__(
        self,
        env: dict[str, str],
        log_path: Path,
        *,
        concurrency: int,
        pool: str = "prefork",
        queue: str = "celery",
        name: str = "bench",
    ):
        self.concurrency, self.pool, self.queue = concurrency, pool, queue
        self.hostname = f"{name}@{socket.gethostname()}"
        command = celery_command(
            "worker",
            "--concurrency",
            str(concurrency),
            "-P",
            pool,
            "-Q",
            queue,
            "--hostname",
            self.hostname,
            "--without-mingle",
            "--without-gossip",
        )
        super().__init__(command, env, log_path)

    def wait_ready(self, app, timeout: float = 60.0) -> None:
        """Until the worker answers a broadcast ping (its pool is up by then)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive("celery worker")
            replies = app.control.ping(destination=[self.hostname], timeout=1.0)
            if any(self.hostname in reply for reply in replies):
                return
        raise RuntimeError(f"celery worker not ready after {timeout:.0f} s; see {self.log_path}")


class RedisServer(Background):
    """A private ``redis-server`` on 127.0.0.1:``port``, nothing persisted.

    The shared Redis is emptied by test runs (``FLUSHDB`` when a test clears the
    cache) at any moment; a Celery broker in it loses its queued tasks and
    kombu's queue bindings, and the run waits forever for work that is gone.
    """

    def __init__(self, port: int, log_path: Path, workdir: str):
        self.port = port
        self.url = f"redis://127.0.0.1:{port}/0"
        command = [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            workdir,
        ]
        super().__init__(command, {}, log_path)

    @staticmethod
    def available() -> bool:
        return shutil.which("redis-server") is not None

    def wait_ready(self, timeout: float = 10.0) -> None:
        import redis

        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                self.check_alive("redis-server")
                try:
                    if client.ping():
                        return
                except redis.ConnectionError:
                    time.sleep(0.05)
        finally:
            client.close()
        raise RuntimeError(f"redis-server not ready after {timeout:.0f} s; see {self.log_path}")


class CuttablePath:
    """127.0.0.1:``port`` forwarded to ``target``; ``cut`` refuses new connections and
    resets the open ones (a PostgreSQL that crashed, as its clients see it),
    ``restore`` listens again on the same port."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self.port = self._listen(0)

    def _listen(self, port: int) -> int:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return listener.getsockname()[1]

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                self._close(end)

    def _close(self, end: socket.socket) -> None:
        with self._lock:
            self._open.discard(end)
        # shutdown() wakes the pump blocked on this socket (close() alone would not, and
        # the connection would live on); both peers see their connection end.
        with contextlib.suppress(OSError):
            end.shutdown(socket.SHUT_RDWR)
        end.close()

    def cut(self) -> None:
        if self._listener is not None:
            self._close(self._listener)  # refused from now on (the accept loop wakes and ends)
            self._listener = None
        with self._lock:
            ends = list(self._open)
        for end in ends:
            self._close(end)

    def restore(self) -> None:
        self._listen(self.port)


@contextlib.contextmanager
def rabbitmq_vhost() -> Iterator[str]:
    """A virtual host of its own on the machine's RabbitMQ, for the guest user, deleted
    after: the tasks a test's worker meets are that test's, not another's left over."""
    name = f"gpuaas-test-{uuid.uuid4().hex[:12]}"
    subprocess.run(["rabbitmqctl", "-q", "add_vhost", name], check=True, capture_output=True)
    try:
        subprocess.run(
            ["rabbitmqctl", "-q", "set_permissions", "-p", name, "guest", ".*", ".*", ".*"],
            check=True,
            capture_output=True,
        )
        yield name
    finally:
        subprocess.run(["rabbitmqctl", "-q", "delete_vhost", name], capture_output=True)
