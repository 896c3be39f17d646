"""DDN EXAScaler (Lustre): tenant directories with quotas, and NodeMaps that
decide which nodes may mount them."""

from __future__ import annotations

import hashlib
import ipaddress
import re
import shlex
import socket
import subprocess
from typing import Protocol

from django.conf import settings

from apps.core import simulation
from apps.core.drivers import DriverError, load

GB = 2**30  # Lustre quotas count binary gigabytes (``lfs setquota -B 10G``)
BASELINE_LATENCY_MS = 2.0


class Ddn(Protocol):
    def create_directory(self, path: str, quota_gb: int, project_id: int) -> None: ...
    def create_nodemap(self, nodemap: str, path: str) -> None: ...
    def add_node(self, nodemap: str, hostname: str) -> None: ...
    def remove_node(self, nodemap: str, hostname: str) -> None: ...
    def set_quota(self, path: str, quota_gb: int) -> None: ...
    def used_bytes(self, path: str) -> int: ...
    def latency_ms(self, path: str) -> float: ...


def driver() -> Ddn:
    return load(
        "ddn",
        {"simulated": "apps.storage.drivers.ddn.SimulatedDdn", "real": "apps.storage.drivers.ddn.SshDdn"},
    )


class SimulatedDdn:
    system = "ddn"

    def create_directory(self, path: str, quota_gb: int, project_id: int) -> None:
        simulation.inject(self.system, "create_directory", path)
        simulation.put(self.system, "directory", path, quota_gb=quota_gb, project_id=project_id)

    def create_nodemap(self, nodemap: str, path: str) -> None:
        simulation.inject(self.system, "create_nodemap", nodemap)
        if simulation.get(self.system, "nodemap", nodemap) is None:
            simulation.put(self.system, "nodemap", nodemap, path=path, nodes=[])

    def add_node(self, nodemap: str, hostname: str) -> None:
        simulation.inject(self.system, "add_node", hostname)
        with simulation.locked(self.system, "nodemap", nodemap) as resource:
            if resource is None:
                raise DriverError(f"DDN has no NodeMap {nodemap}", transient=False)
            simulation.update(resource, nodes=sorted(set(resource.state["nodes"]) | {hostname}))

    def remove_node(self, nodemap: str, hostname: str) -> None:
        simulation.inject(self.system, "remove_node", hostname)
        with simulation.locked(self.system, "nodemap", nodemap) as resource:
            if resource is not None:
                simulation.update(resource, nodes=sorted(set(resource.state["nodes"]) - {hostname}))

    def set_quota(self, path: str, quota_gb: int) -> None:
        simulation.inject(self.system, "set_quota", path)
        with simulation.locked(self.system, "directory", path) as resource:
            if resource is None:
                raise DriverError(f"DDN has no directory {path}", transient=False)
            simulation.update(resource, quota_gb=quota_gb)

    def used_bytes(self, path: str) -> int:
        """What the tenant's files take; the simulated world fills a directory only when
        a drill or test says so (``used_bytes`` in its state)."""
        simulation.inject(self.system, "used_bytes", path)
        resource = simulation.get(self.system, "directory", path)
        if resource is None:
            raise DriverError(f"DDN has no directory {path}", transient=False)
        return int(resource.state.get("used_bytes", 0))

    def latency_ms(self, path: str) -> float:
        """How long the file system takes to answer in the tenant's directory (EXAScaler's
        monitoring reports it per file system); the simulated world's is a healthy
        ``BASELINE_LATENCY_MS`` unless a drill or test holds another (``latency_ms``)."""
        simulation.inject(self.system, "latency_ms", path)
        resource = simulation.get(self.system, "directory", path)
        if resource is None:
            raise DriverError(f"DDN has no directory {path}", transient=False)
        return float(resource.state.get("latency_ms", BASELINE_LATENCY_MS))


MOUNT = "/lustre"  # seed 001 section 4.5.2: every tenant directory is /lustre/{tenant-id}/
# A tenant id as CCP gives it (``apps.tenancy.models.ccp_identifier``), never "." or "..".
_DIRECTORY = re.compile(rf"^{MOUNT}/(?!\.\.?/)([A-Za-z0-9._-]{{1,64}})/$")
# Errno texts the Lustre tools print for a server that is busy, recovering or slow:
# worth a retry. Anything else (bad argument, no such directory) is not.
_TRANSIENT_ERRORS = (
    "Resource temporarily unavailable",
    "Device or resource busy",
    "Input/output error",
    "Connection timed out",
    "Operation already in progress",
    "Interrupted system call",
)
# A Unix socket path has 107 bytes; ssh names its socket ``<dir>/<40 hex digits>`` plus
# a 17-character temporary suffix while it makes it: a longer directory connects anew each time.
_CONTROL_DIR_MAX = 48
# ``lfs df`` timed on the MGS itself, so the SSH round trip does not count: microseconds.
_TIMED_DF = (
    'start=$(date +%s%N); lfs df "$1" >/dev/null || exit $?; '
    "end=$(date +%s%N); echo $(( (end - start) / 1000 ))"
)


def lustre_nodemap(name: str) -> str:
    """The Lustre name of the platform's NodeMap ``name``: Lustre allows 16 characters
    of letters, digits and ``_`` only (``nodemap_name_is_valid``), tenant ids are up to 64
    with ``.`` and ``-``, so the name on the MGS is a digest of ours (decision 0067)."""
    return "nm" + hashlib.blake2b(name.encode(), digest_size=7).hexdigest()


class SshDdn:
    """The storage plugin's way in (seed 001 section 4.5.2): SSH to the DDN MGS and its
    ``lfs`` and ``lctl`` tools, with OpenSSH's client (decision 0067).

    ``GPUAAS_DDN_SSH_HOST``, ``_PORT``, ``_USER``, ``_KEY_FILE`` (the private key),
    ``_KNOWN_HOSTS`` (the MGS's host keys; nothing else is trusted), ``_TIMEOUT`` and
    ``_PERSIST`` (how long one connection is kept for the next commands);
    ``GPUAAS_DDN_LNET`` names the LNet network of the nodes' NIDs (``o2ib``).

    A directory's quota is a Lustre project quota: the directory carries a project id
    (the caller's, unique per tenant) that ``lfs setquota -p`` and ``lfs quota -p`` name.
    """

    system = "ddn"

    def __init__(self):
        missing = [
            name
            for name, value in (
                ("GPUAAS_DDN_SSH_HOST", settings.DDN_SSH_HOST),
                ("GPUAAS_DDN_SSH_KEY_FILE", settings.DDN_SSH_KEY_FILE),
                ("GPUAAS_DDN_SSH_KNOWN_HOSTS", settings.DDN_SSH_KNOWN_HOSTS),
            )
            if not value
        ]
        if missing:
            raise DriverError(f"the real DDN driver needs {', '.join(missing)}", transient=False)

    @staticmethod
    def _multiplexing() -> list[str]:
        """One SSH connection carries the commands of the next ``GPUAAS_DDN_SSH_PERSIST``
        seconds (OpenSSH's ControlMaster): a handshake per command would cost the MGS a
        key exchange each, eight of them per tenant provisioned. 0 turns it off."""
        persist = int(settings.DDN_SSH_PERSIST)
        if persist <= 0:
            return []
        sockets = settings.VAR_DIR / "ddn-ssh"
        if len(str(sockets)) > _CONTROL_DIR_MAX:
            return []
        sockets.mkdir(mode=0o700, parents=True, exist_ok=True)
        return [
            "-o",
            "ControlMaster=auto",
            "-o",
            f"ControlPath={sockets}/%C",
            "-o",
            f"ControlPersist={persist}",
        ]

    def _ssh(self, command: str) -> subprocess.CompletedProcess:
        timeout = settings.DDN_SSH_TIMEOUT
        argv = [
            "ssh",
            "-F",
            "/dev/null",  # no user or system ssh_config: these options are the whole policy
            "-i",
            settings.DDN_SSH_KEY_FILE,
            "-p",
            str(settings.DDN_SSH_PORT),
            "-l",
            settings.DDN_SSH_USER,
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            f"UserKnownHostsFile={settings.DDN_SSH_KNOWN_HOSTS}",
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            f"ConnectTimeout={max(1, int(timeout))}",
            *self._multiplexing(),
            "--",
            settings.DDN_SSH_HOST,
            command,
        ]
        try:
            return subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False
            )
        except subprocess.TimeoutExpired:
            raise DriverError(f"DDN MGS did not answer within {timeout:g} s") from None
        except OSError as exc:
            raise DriverError(f"cannot run ssh: {exc.strerror}", transient=False) from exc

    def _run(self, *argv: str, exists_ok: bool = False) -> str:
        """One command on the MGS, every argument quoted for its shell; its output."""
        result = self._ssh(shlex.join(argv))
        what = " ".join(argv[:2])
        error = result.stderr.strip()[-300:]
        if result.returncode == 255:
            # ssh's own failure: the command never ran.
            refused = (
                "Host key verification failed" in error
                or "Permission denied" in error
                or "IDENTIFICATION HAS CHANGED" in error
            )
            raise DriverError(f"cannot reach the DDN MGS by SSH: {error}", transient=not refused)
        if result.returncode != 0:
            if exists_ok and "File exists" in error:
                return result.stdout
            transient = any(text in error for text in _TRANSIENT_ERRORS)
            raise DriverError(f"DDN {what} failed: {error}", transient=transient)
        return result.stdout

    @staticmethod
    def _directory(path: str) -> str:
        """Tenant ids are input: anything but /lustre/{tenant-id}/ is refused before SSH."""
        if not _DIRECTORY.match(path):
            raise DriverError(f"not a tenant directory: {path!r}", transient=False)
        return path.rstrip("/")

    def _project_id(self, path: str) -> int:
        # ``lfs project -d``: "<projid> <P|-> <path>"
        output = self._run("lfs", "project", "-d", path).split()
        if not output or not output[0].isdigit() or int(output[0]) == 0:
            raise DriverError(f"DDN directory {path} has no project quota id", transient=False)
        return int(output[0])

    def _nid(self, hostname: str) -> str:
        """The node's LNet NID: the IPv4 address its name resolves to, on ``GPUAAS_DDN_LNET``."""
        try:
            address = ipaddress.IPv4Address(hostname)
        except ValueError:
            try:
                address = socket.getaddrinfo(hostname, None, socket.AF_INET)[0][4][0]
            except socket.gaierror as exc:
                raise DriverError(
                    f"cannot resolve {hostname} to its InfiniBand address: {exc.strerror}",
                    transient=exc.errno == socket.EAI_AGAIN,
                ) from exc
        return f"{address}@{settings.DDN_LNET}"

    def create_directory(self, path: str, quota_gb: int, project_id: int) -> None:
        directory = self._directory(path)
        self._run("lfs", "mkdir", directory, exists_ok=True)
        self._run("lfs", "project", "-p", str(int(project_id)), "-r", "-s", directory)
        self._run("lfs", "setquota", "-p", str(int(project_id)), "-B", f"{int(quota_gb)}G", directory)

    def create_nodemap(self, nodemap: str, path: str) -> None:
        name, fileset = lustre_nodemap(nodemap), self._directory(path).removeprefix(MOUNT)
        self._run("lctl", "nodemap_add", name, exists_ok=True)
        self._run("lctl", "nodemap_set_fileset", "--name", name, "--fileset", fileset)
        # Tenants' root is squashed and their ids are not trusted: their nodes see only this fileset.
        for prop in ("admin", "trusted"):
            self._run("lctl", "nodemap_modify", "--name", name, "--property", prop, "--value", "0")
        self._run("lctl", "nodemap_activate", "1")

    def _member_of(self, nid: str) -> str:
        return self._run("lctl", "nodemap_test_nid", nid).strip()

    def add_node(self, nodemap: str, hostname: str) -> None:
        name, nid = lustre_nodemap(nodemap), self._nid(hostname)
        member_of = self._member_of(nid)
        if member_of == name:
            return
        if member_of != "default":
            # Still another tenant's: adding would fail anyway, and must not be papered over.
            raise DriverError(f"{hostname} ({nid}) is still in NodeMap {member_of}", transient=False)
        self._run("lctl", "nodemap_add_range", "--name", name, "--range", nid)

    def remove_node(self, nodemap: str, hostname: str) -> None:
        name, nid = lustre_nodemap(nodemap), self._nid(hostname)
        if self._member_of(nid) == name:
            self._run("lctl", "nodemap_del_range", "--name", name, "--range", nid)

    def set_quota(self, path: str, quota_gb: int) -> None:
        directory = self._directory(path)
        project_id = self._project_id(directory)
        self._run("lfs", "setquota", "-p", str(project_id), "-B", f"{int(quota_gb)}G", directory)

    def used_bytes(self, path: str) -> int:
        directory = self._directory(path)
        # ``lfs quota -q``: "<filesystem> <kbytes>[*] <quota> <limit> <grace> <files> ..."
        # (a ``*`` marks a project over its limit).
        fields = self._run("lfs", "quota", "-q", "-p", str(self._project_id(directory)), directory).split()
        if len(fields) < 2 or not fields[1].rstrip("*").isdigit():
            raise DriverError(f"DDN lfs quota answered {' '.join(fields)[:100]!r}", transient=False)
        return int(fields[1].rstrip("*")) * 1024

    def latency_ms(self, path: str) -> float:
        """How long ``lfs df`` takes on the MGS for the tenant's file system: a statfs of
        every MDT and OST, so one slow server shows (decision 0067)."""
        output = self._run("sh", "-c", _TIMED_DF, "sh", self._directory(path)).strip()
        if not output.isdigit():
            raise DriverError(f"DDN latency probe answered {output[:100]!r}", transient=False)
        return int(output) / 1000
