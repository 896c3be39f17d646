"""Debian's nginx running docker/nginx.conf, the production data plane, for tests.

The configuration is the one template production uses, with its Lua
(docker/nginx/); ``render`` fills its ``${GPUAAS_*}`` placeholders the way the
nginx image (docker/Dockerfile.nginx) and ``make prod-local`` do at start.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from gpuaas.prodlocal import NGINX_CONF_DIR as CONF_DIR
from gpuaas.prodlocal import render_nginx as render
from tests.support.processes import free_port

NGINX = "/usr/sbin/nginx"  # scripts/ensure-nginx.sh installs it, with its Lua module


class Nginx:
    def __init__(
        self,
        portal: str,
        auth_secret: str,
        *,
        apps_domain: str = "",
        conf_dir: Path = CONF_DIR,
        edit: Callable[[str], str] = lambda text: text,
    ):
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="gpuaas-nginx-"))
        self.conf = self.dir / "nginx.conf"
        self.conf.write_text(
            edit(
                render(
                    {
                        "GPUAAS_NGINX_LISTEN": f"127.0.0.1:{self.port}",
                        "GPUAAS_NGINX_STATE_DIR": str(self.dir),
                        "GPUAAS_NGINX_CONF_DIR": str(conf_dir),
                        "GPUAAS_PORTAL_UPSTREAM": portal,
                        "GPUAAS_PROXY_AUTH_SECRET": auth_secret,
                        "GPUAAS_APPS_DOMAIN": apps_domain,
                        # The portal is served through this nginx (tests set ISSUER to its url).
                        "GPUAAS_ISSUER": f"http://127.0.0.1:{self.port}",
                    }
                )
            )
        )
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def output(self) -> str:
        return (self.dir / "output.log").read_text(errors="replace")

    def start(self) -> Nginx:
        with open(self.dir / "output.log", "wb") as log:
            self.process = subprocess.Popen(
                [NGINX, "-p", str(self.dir), "-c", str(self.conf), "-e", "stderr", "-g", "daemon off;"],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 10
        while True:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nginx did not start:\n{self.output}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)

    def reload(self) -> None:
        """``nginx -s reload``: the configuration and its Lua read anew by new workers
        (shared memory is kept); returns once the old workers are gone."""
        old = {worker.pid for worker in self.workers()}
        self.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while (workers := {worker.pid for worker in self.workers()}) & old or not workers:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nginx did not reload:\n{self.output}")
            time.sleep(0.05)

    def workers(self) -> list[psutil.Process]:
        """The master's worker processes."""
        return psutil.Process(self.process.pid).children()

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)
