"""A fake DDN MGS: a real OpenSSH sshd on loopback whose login (this process's user,
by key only) finds fake ``lfs`` and ``lctl`` first on its PATH
(tests/support/fake_lustre.py), keeping the file system's state in a directory."""

from __future__ import annotations

import fcntl
import json
import os
import pwd
import socket
import subprocess
import time
from contextlib import suppress
from pathlib import Path

import psutil

from tests.support.fake_lustre import ToolServer
from tests.support.processes import Background, free_port
from tests.support.ssh import KeyPair, key_pair


def host_key(directory: Path, name: str) -> str:
    """A new ed25519 host key: its "type base64" public part."""
    path = directory / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True, timeout=60)
    return " ".join((directory / f"{name}.pub").read_text().split()[:2])


class FakeDdn:
    def __init__(self, directory: Path):
        self.dir = directory
        self.state_dir = directory / "lustre"
        self.state_dir.mkdir(parents=True)
        bin_dir = directory / "bin"
        bin_dir.mkdir()
        self.tools = ToolServer(self.state_dir)
        for tool in ("lfs", "lctl"):
            script = bin_dir / tool
            script.write_text(self.tools.stub(tool))
            script.chmod(0o755)
        self.client: KeyPair = key_pair(directory, "platform_key")
        (directory / "authorized_keys").write_text(self.client.public_key + "\n")
        self.host_key = host_key(directory, "ssh_host_ed25519_key")
        self.user = pwd.getpwuid(os.getuid()).pw_name
        self.port = free_port()
        self.known_hosts = directory / "known_hosts"
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {self.host_key}\n")
        config = directory / "sshd_config"
        config.write_text(
            "\n".join(
                [
                    f"ListenAddress 127.0.0.1:{self.port}",
                    f"HostKey {directory / 'ssh_host_ed25519_key'}",
                    f"PidFile {directory / 'sshd.pid'}",
                    f"AuthorizedKeysFile {directory / 'authorized_keys'}",
                    f"AllowUsers {self.user}",
                    "StrictModes no",
                    "UsePAM no",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PermitRootLogin prohibit-password",
                    # A home of its own: not the test user's shell start-up files.
                    f"SetEnv HOME={directory} PATH={bin_dir}:/usr/bin:/bin",
                    "LogLevel ERROR",
                    "",
                ]
            )
        )
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        self.sshd = Background(["/usr/sbin/sshd", "-D", "-e", "-f", str(config)], {}, directory / "sshd.log")
        deadline = time.monotonic() + 10
        while True:
            self.sshd.check_alive("the fake MGS's sshd")
            try:
                # Up to the banner: the probe's connection process exists by now, so
                # close() finds it among the listener's children (once the listener is
                # gone, only the system would reap it, a second or two later).
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as probe:
                    probe.recv(4)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def settings(self) -> dict:
        """The driver's settings for this MGS."""
        return {
            "DDN_SSH_HOST": "127.0.0.1",
            "DDN_SSH_PORT": self.port,
            "DDN_SSH_USER": self.user,
            "DDN_SSH_KEY_FILE": str(self.client.private_path),
            "DDN_SSH_KNOWN_HOSTS": str(self.known_hosts),
        }

    # The file system as the tools left it, and trouble for the next command.
    def state(self) -> dict:
        with suppress(FileNotFoundError):
            return json.loads((self.state_dir / "state.json").read_text())
        return {"directories": {}, "nodemaps": {}, "active": False}

    def _change(self, change) -> None:
        with open(self.state_dir / "state.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = self.state()
            change(state)
            (self.state_dir / "state.json").write_text(json.dumps(state))

    def quota_gb(self, path: str) -> int | None:
        """The directory's project quota (hard block limit) in GB; None without a directory."""
        state = self.state()
        entry = state["directories"].get(path.rstrip("/"))
        if entry is None:
            return None
        return state.get("project_limits", {}).get(str(entry["project"]), 0) // 2**20

    def fill(self, path: str, used_bytes: int) -> None:
        self._change(lambda state: state["directories"][path.rstrip("/")].update(used_bytes=used_bytes))

    def fail_next(self, error: str) -> None:
        """The next command fails with this errno text (``Input/output error``)."""
        self._change(lambda state: state.update(fail_next=error))

    def hang(self, seconds: float) -> None:
        self._change(lambda state: state.update(hang_seconds=seconds))

    def slow_df(self, ms: float) -> None:
        self._change(lambda state: state.update(df_ms=ms))

    def calls(self) -> list[list[str]]:
        with suppress(FileNotFoundError):
            lines = (self.state_dir / "calls.log").read_text().splitlines()
            return [json.loads(line) for line in lines]
        return []

    def close(self) -> None:
        """The MGS goes away, connections and all: each connection's sshd is a session
        of its own, out of the listener's process group, and would keep the driver's
        shared connection (ControlPersist) alive. Killed, not asked: OpenSSH 9.2's session
        process can take a SIGTERM just before it polls and sleep on, and a teardown then
        waited out the 10 s below (18.7 s of this module's 27 in `make check`, 2026-11-29)."""
        with suppress(psutil.NoSuchProcess):
            listener = psutil.Process(self.sshd.process.pid)
            connections = listener.children()
            for process in listener.children(recursive=True):
                with suppress(psutil.NoSuchProcess):
                    process.kill()
            psutil.wait_procs(connections, timeout=10)
        self.sshd.stop()
        self.tools.close()
