"""``serve [--host 127.0.0.1] [--port 8000]``: the portal over ASGI (HTTP and WebSocket).

On the embedded default (no ``REDIS_URL``) the Celery worker and beat run in this
process too, and one local node agent as its child process, so one command is
the whole system.
"""

import ipaddress
import os

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
            embedded.start_all()
            agent = local_agent.start(host, port)
            self.stdout.write(
                f"GPUaaS portal (embedded default) on http://{host}:{port}/ - sign in as demo/demo"
            )
            try:
                uvicorn.run(
                    "gpuaas.asgi:application", host=host, port=port, proxy_headers=False, **asgiserver.OPTIONS
                )
            finally:
                local_agent.stop(agent)
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


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
