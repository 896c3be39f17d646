"""``serve [--host 127.0.0.1] [--port 8000]``: the portal over ASGI (HTTP and WebSocket).

On the embedded default (no ``REDIS_URL``) the Celery worker and beat run in this
process too, and one local node agent as its child process, so one command is
the whole system. There it speaks to the person at the terminal: one line a step,
the sign-in line last, and a line when Ctrl-C has stopped everything (log lines go
to ``var/log/``, see LOGGING).
"""

import ipaddress
import os
import signal

import uvicorn
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from apps.core import asgiserver, embedded
from apps.runtime import local_agent
from gpuaas import env


class Command(BaseCommand):
    help = "Serve the portal (and, on the embedded default, its workers)."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--workers", type=int, default=1, help="web worker processes (production mode)")

    def say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()

    def handle(self, *args, host, port, workers, **options):
        if env.raw("GPUAAS_SIMULATED_STEP_SECONDS") in (None, ""):
            # Under serve, simulated hardware takes visible time per step (tests: 0).
            # The environment carries it to uvicorn's worker processes too.
            os.environ["GPUAAS_SIMULATED_STEP_SECONDS"] = "2"
            settings.SIMULATED_STEP_SECONDS = 2.0
        if settings.EMBEDDED:
            if not _loopback(host):
                # The local agent runs tenant code on this host, beside var/'s secrets and
                # every tenant's data: it is for one person's machine, not a network.
                raise CommandError(
                    f"the embedded default serves only on loopback (127.0.0.1, ::1, localhost), "
                    f"not {host}: it runs a local node agent with tenant workloads on this host. "
                    "For a server, set REDIS_URL and DATABASE_URL (production mode) and run agents on nodes."
                )
            if workers != 1:
                self.stderr.write("the embedded default runs one process; ignoring --workers")
            if settings.LOG_FORMAT == "file":
                self.say(f"Logs go to {settings.LOG_FILE}")
            self._serve_embedded(host, port)
        else:
            # Behind nginx: X-Forwarded-For/-Proto are honoured only from the addresses
            # in FORWARDED_ALLOW_IPS (uvicorn's variable; default 127.0.0.1).
            uvicorn.run(
                "gpuaas.asgi:application",
                host=host,
                port=port,
                workers=workers,
                proxy_headers=True,
                **asgiserver.OPTIONS,
            )

    def _serve_embedded(self, host: str, port: int) -> None:
        embedded.start_all()
        self.say("Background worker and scheduler started")
        node = local_agent.local_agent_node()
        agent = local_agent.start(host, port)
        if agent is None:
            self.say("No local node agent: run `python manage.py bootstrap_demo` first")
        else:
            self.say(f"Local node agent started for node {node.hostname}")
        url = f"http://{f'[{host}]' if ':' in host else host}:{port}/"

        def started():
            self.say(
                f"Ready: open {url} and sign in as demo / demo (operators: admin / admin). Ctrl-C stops."
            )

        def stopping():
            self.say("Stopping the portal, its worker and the local node agent...")
            if agent is not None:
                agent.terminate()  # now, so it stops while the server closes its connections

        config = uvicorn.Config(
            "gpuaas.asgi:application",
            host=host,
            port=port,
            proxy_headers=False,
            timeout_graceful_shutdown=GRACE_SECONDS,
            **asgiserver.OPTIONS,
        )
        server = _Server(config, started=started, stopping=stopping)
        # uvicorn raises the signal that stopped it again once it has stopped, under the
        # handler it found: without these, SIGTERM would end the process before the agent
        # is stopped, and SIGINT would end it in a KeyboardInterrupt traceback.
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: None)
        try:
            server.run()
        except SystemExit:  # uvicorn's answer to a port it cannot bind
            pass
        finally:
            local_agent.stop(agent, timeout=AGENT_STOP_SECONDS)
        if not server.started:
            log = settings.LOG_FILE if settings.LOG_FORMAT == "file" else "the log lines above"
            raise CommandError(f"the portal could not start on {url} (is the port taken?); see {log}")
        self.say("Stopped: the portal, its worker and the local node agent.")


# Ctrl-C stops the embedded default within about this: open connections (the local
# agent's long poll, browsers' WebSockets) get GRACE_SECONDS to finish, the agent the
# rest (it stops its SSH server and hands its workloads to the next serve).
GRACE_SECONDS = 1
AGENT_STOP_SECONDS = 1.5


class _Server(uvicorn.Server):
    """uvicorn's server, telling ``serve`` when it listens and when it starts to stop."""

    def __init__(self, config, *, started, stopping):
        super().__init__(config)
        self._on_started, self._on_stopping = started, stopping

    async def startup(self, sockets=None):
        await super().startup(sockets)
        if self.started:
            self._on_started()

    async def shutdown(self, sockets=None):
        self._on_stopping()
        await super().shutdown(sockets)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
