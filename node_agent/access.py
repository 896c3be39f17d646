"""SSH access to this node: the runtime user, the keys in its ``authorized_keys`` and
the SSH server users log in to.

The platform says which keys the runtime user should hold; the agent writes them into
one marked block of the user's ``authorized_keys`` and reports which ones the block
holds. Lines outside the block (an operator's own keys) are never touched.

Two kinds of host:
- ``system`` (a real node, the agent as root): the node's own ``sshd`` on port 22; the
  agent creates the runtime user with ``useradd`` when it is missing.
- ``own`` (the embedded default's local agent): an ``sshd`` of the agent's own on
  127.0.0.1 and a free port, with host keys and ``AuthorizedKeysFile`` in the agent's
  state directory, logging in the user the agent runs as.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

logger = logging.getLogger(__name__)

KINDS = ("off", "own", "system")
BEGIN = "# BEGIN gpuaas managed keys: the node agent rewrites this block, keep your own keys outside it"
END = "# END gpuaas managed keys"
MARK = "gpuaas-key:"
USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
KEY_LINE = re.compile(r"^[a-z0-9@.-]+ [A-Za-z0-9+/=]+$")
SSHD = "/usr/sbin/sshd"


class AccessError(Exception):
    """The node cannot hold the keys as asked (a bad user name, useradd failing)."""


# --- the managed block ------------------------------------------------------------------


def render(text: str, keys: list[dict]) -> str:
    """``text`` (an authorized_keys file) with its managed block holding exactly ``keys``;
    everything outside the block stays as it was. No keys: no block."""
    outside, inside = [], False
    for line in text.splitlines():
        if line == BEGIN:
            inside = True
        elif line == END:
            inside = False
        elif not inside:
            outside.append(line)
    while outside and not outside[-1].strip():
        outside.pop()
    block = []
    for key in keys:
        if not KEY_LINE.match(key["public_key"]):
            raise AccessError(f"refusing a malformed key line for key {key['id']}")
        block.append(f"{key['public_key']} {MARK}{key['id']}")
    if block:
        outside += [BEGIN, *block, END]
    return "\n".join(outside) + "\n" if outside else ""


def managed_ids(text: str) -> list[str]:
    """The key ids the file's managed block holds."""
    ids, inside = [], False
    for line in text.splitlines():
        if line in (BEGIN, END):
            inside = line == BEGIN
        elif inside and MARK in line:
            ids.append(line.rsplit(MARK, 1)[1].strip())
    return ids


def reconcile(path: Path, keys: list[dict], owner: pwd.struct_passwd | None = None) -> list[str]:
    """Rewrite the block of ``path`` (atomically: a reader sees the old file or the new
    one); the ids it holds afterwards."""
    try:
        current = path.read_text()
    except FileNotFoundError:
        current = ""
    wanted = render(current, keys)
    if wanted != current:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".authorized_keys.")
        try:
            with os.fdopen(descriptor, "w") as file:
                file.write(wanted)
            os.chmod(temporary, 0o600)
            if owner is not None:
                os.chown(temporary, owner.pw_uid, owner.pw_gid)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    return managed_ids(wanted)


def host_keys(directory: Path, pattern: str = "ssh_host_*_key.pub") -> list[str]:
    """The host's public keys, ``type base64`` each (comments dropped)."""
    lines = []
    for path in sorted(directory.glob(pattern)):
        words = path.read_text().split()
        if len(words) >= 2 and words[0] != "ssh-dss":  # OpenSSH no longer accepts DSA
            lines.append(f"{words[0]} {words[1]}")
    return lines


# --- hosts ----------------------------------------------------------------------------------


class SystemHost:
    """A real node: its own sshd, the runtime user made with useradd."""

    kind = "system"

    def __init__(self, state_dir: Path, port: int = 22, ssh_dir: Path = Path("/etc/ssh")):
        self.state_dir, self.port, self.ssh_dir = state_dir, port, ssh_dir
        self._last_user = state_dir / "ssh-user"

    def start(self) -> None:
        """The node's sshd is the OS's; nothing to start."""

    def stop(self) -> None:
        """Nothing of ours runs."""

    def apply(self, user: str | None, keys: list[dict]) -> tuple[str, list[str]]:
        """Keys onto ``user`` (None: take them off the user last managed)."""
        if user is None:
            previous = self._last_user.read_text().strip() if self._last_user.exists() else ""
            if not previous:
                return "", []
            entry = _existing_user(previous)
            if entry is not None:
                reconcile(_authorized_keys(entry), [], entry)
            return previous, []
        if not USER_NAME.match(user):
            raise AccessError(f"{user!r} is not a user name this agent creates")
        entry = _existing_user(user) or _useradd(user)
        self._last_user.write_text(user)
        return user, reconcile(_authorized_keys(entry), keys, entry)

    def host_keys(self) -> list[str]:
        return host_keys(self.ssh_dir)


def _existing_user(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


def _useradd(user: str) -> pwd.struct_passwd:
    result = subprocess.run(
        ["useradd", "--create-home", "--user-group", "--shell", "/bin/bash", user],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        raise AccessError(f"useradd {user} failed: {result.stderr.strip()[:500]}")
    logger.info("runtime user %s created", user)
    return pwd.getpwnam(user)


def _authorized_keys(entry: pwd.struct_passwd) -> Path:
    home = Path(entry.pw_dir)
    ssh_dir = home / ".ssh"
    if not ssh_dir.exists():
        ssh_dir.mkdir(mode=0o700, parents=True)
        os.chown(ssh_dir, entry.pw_uid, entry.pw_gid)
    return ssh_dir / "authorized_keys"


class OwnSshd:
    """The embedded default: an sshd of the agent's own on loopback, as the agent's user."""

    kind = "own"

    def __init__(self, state_dir: Path, listen: str = "127.0.0.1"):
        self.dir = state_dir / "ssh"
        self.listen = listen
        self.user = pwd.getpwuid(os.getuid()).pw_name
        self.port = 0
        self.process: subprocess.Popen | None = None

    @property
    def authorized_keys(self) -> Path:
        return self.dir / "authorized_keys"

    def start(self) -> None:
        if shutil.which(SSHD) is None:
            raise AccessError(f"{SSHD} is missing: install openssh-server (make run does)")
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        for kind in ("ed25519", "ecdsa"):
            key = self.dir / f"ssh_host_{kind}_key"
            if not key.exists():
                subprocess.run(
                    ["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "gpuaas-local-node", "-f", str(key)],
                    check=True,
                    capture_output=True,
                    timeout=60,
                )
        if os.geteuid() == 0:
            # sshd started by root checks its privilege-separation directory.
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        self.stop_left_over()
        self.port = self._port()
        config = self.dir / "sshd_config"
        config.write_text(self._config())
        log = open(self.dir / "sshd.log", "ab")  # noqa: SIM115 (the child keeps it)
        with log:
            self.process = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        self._wait_listening()
        logger.info("sshd for %s listening on %s:%s", self.user, self.listen, self.port)

    def _config(self) -> str:
        root = os.geteuid() == 0
        lines = [
            f"ListenAddress {self.listen}:{self.port}",
            *(f"HostKey {self.dir / f'ssh_host_{kind}_key'}" for kind in ("ed25519", "ecdsa")),
            f"PidFile {self.dir / 'sshd.pid'}",
            f"AuthorizedKeysFile {self.authorized_keys}",
            f"AllowUsers {self.user}",
            # The files live in the agent's state directory, not a home with the modes
            # sshd expects of one; unprivileged, sshd can neither use PAM nor change users.
            "StrictModes no",
            "UsePAM no",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            f"PermitRootLogin {'prohibit-password' if root else 'no'}",
            "AllowAgentForwarding no",
            "AllowTcpForwarding local",  # ssh -L to an app's host_local endpoint
            "GatewayPorts no",
            "X11Forwarding no",
            "PermitTunnel no",
            "PermitUserEnvironment no",
            "PrintMotd no",
            "ClientAliveInterval 30",
            "MaxStartups 10:30:60",
            # Errors only: every connection attempt at INFO would let anyone who reaches the
            # port grow the log without bound.
            "LogLevel ERROR",
            "Subsystem sftp internal-sftp",
            "",
        ]
        return "\n".join(lines)

    def _port(self) -> int:
        """The port of the last run when it is free (users keep their ssh command), else a free one."""
        saved = self.dir / "port"
        with contextlib.suppress(FileNotFoundError, ValueError):
            port = int(saved.read_text())
            if _bindable(self.listen, port):
                return port
        with socket.socket() as probe:
            probe.bind((self.listen, 0))
            port = probe.getsockname()[1]
        saved.write_text(str(port))
        return port

    def stop_left_over(self, timeout: float = 5.0) -> None:
        """An sshd a killed agent left behind still holds our port: stopped, and waited
        for until the port is free (within ``timeout``), so the next sshd keeps it. A
        fixed half second was too long on an idle node and could be too short on a busy one."""
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
            pid = int((self.dir / "sshd.pid").read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if str(self.dir / "sshd_config").encode() in cmdline:
                os.kill(pid, signal.SIGTERM)
                port = int((self.dir / "port").read_text())
                deadline = time.monotonic() + timeout
                while not _bindable(self.listen, port) and time.monotonic() < deadline:
                    time.sleep(0.05)

    def _wait_listening(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = (self.dir / "sshd.log").read_text(errors="replace")[-500:]
                raise AccessError(f"sshd exited ({self.process.returncode}): {tail}")
            with contextlib.suppress(OSError), socket.create_connection((self.listen, self.port), timeout=1):
                return
            time.sleep(0.1)
        raise AccessError(f"sshd did not listen on {self.listen}:{self.port} within {timeout:g} s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def apply(self, user: str | None, keys: list[dict]) -> tuple[str, list[str]]:
        """The platform's runtime user name does not apply here: logins are the agent's user."""
        if self.process is not None and self.process.poll() is not None:
            logger.warning("sshd exited (%s); starting it again", self.process.returncode)
            self.start()
        return self.user, reconcile(self.authorized_keys, keys if user is not None else [])

    def host_keys(self) -> list[str]:
        return host_keys(self.dir)


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def create(kind: str, state_dir: Path, port: int = 22):
    if kind == "own":
        return OwnSshd(state_dir)
    if kind == "system":
        return SystemHost(state_dir, port)
    return None
