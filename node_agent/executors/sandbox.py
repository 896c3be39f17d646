"""Where the process executor's workloads run: out of the platform's reach.

On the embedded default the local agent runs tenant code (a JupyterLab kernel) on
the portal's own host. Without a boundary that code could read the portal's secret
key, its encryption key and the SQLite database of every tenant, or change the
virtualenv the portal runs from. So each workload runs in a bubblewrap sandbox:

- the system read-only, with a private /tmp, /dev and /proc (its own pid namespace);
- the platform hidden: the repository, ``GPUAAS_VAR_DIR``, the agent's state directory
  and the home of the user the agent runs as are empty directories inside;
- the Python environment read-only (the virtualenv and the interpreter it points at),
  so apps shipped in it run but cannot change it;
- its own directory (``work/``, its home) the only place it can write.

When the agent runs as root (a GPU node, CI) the workload also runs as an
unprivileged user of its own (``gpuaas-workload``, created when missing): bwrap sets
up the mounts as root and ``setpriv`` drops to that user before the app starts. An
agent that is not root (a newcomer's ``make run``) cannot switch users; bwrap then
runs in an unprivileged user namespace and the hidden paths are what keeps the
platform out of reach. Without bwrap the executor refuses to start workloads.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

from node_agent.executors.base import TaskFailed

WORKLOAD_USER = "gpuaas-workload"
REPOSITORY = Path(__file__).resolve().parents[2]  # the checkout: <repository>/node_agent/executors/


class Sandbox:
    def __init__(self, state_dir: Path):
        self.hidden = _hidden_paths(Path(state_dir))
        self.visible = sorted({Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()})
        self.as_root = os.geteuid() == 0

    def command(self, command: list[str], work: Path) -> list[str]:
        """``command`` wrapped to run in the sandbox with ``work`` writable."""
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise TaskFailed(
                "bubblewrap (bwrap) is not installed: workloads do not run outside a sandbox "
                "(apt-get install bubblewrap)"
            )
        private_tmp = "/tmp"  # noqa: S108 - a tmpfs of the sandbox's own, not a shared directory
        wrapped = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", private_tmp]
        for path in self.hidden:
            wrapped += ["--tmpfs", str(path)]
        for path in self.visible:
            wrapped += [*self._passage(path), "--ro-bind", str(path), str(path)]
        wrapped += [*self._passage(work), "--bind", str(work), str(work)]
        wrapped += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        if not self.as_root:
            return [*wrapped, "--unshare-user", "--", *command]
        user = workload_user()
        drop = [
            "setpriv",
            f"--reuid={user.pw_uid}",
            f"--regid={user.pw_gid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
        ]
        # bwrap keeps no capability for the command unless asked: setpriv needs these two.
        return [*wrapped, "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--", *drop, *command]

    def _passage(self, path: Path) -> list[str]:
        """The directories between a hidden path and ``path`` inside it, made traversable
        (0711, not listable): bwrap would copy their modes, and the agent's own are 0700."""
        steps: list[str] = []
        for parent in reversed(path.parents):
            if any(hidden in parent.parents for hidden in self.hidden):
                steps += ["--perms", "0711", "--dir", str(parent)]
        return steps

    def give(self, work: Path) -> None:
        """The workload's directory belongs to the user it runs as."""
        if not self.as_root:
            return
        user = workload_user()
        for path in [work, *work.rglob("*")]:
            os.chown(path, user.pw_uid, user.pw_gid, follow_symlinks=False)


def workload_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(WORKLOAD_USER)
    except KeyError:
        pass
    created = subprocess.run(
        [
            "useradd",
            "--system",
            "--user-group",
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            WORKLOAD_USER,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        return pwd.getpwnam(WORKLOAD_USER)
    except KeyError:
        raise TaskFailed(f"cannot create the user workloads run as: {created.stderr.strip()}") from None


def _hidden_paths(state_dir: Path) -> list[Path]:
    candidates = [REPOSITORY, state_dir, Path.home()]
    if os.environ.get("GPUAAS_VAR_DIR"):
        candidates.append(Path(os.environ["GPUAAS_VAR_DIR"]))
    resolved = {path.resolve() for path in candidates if path.resolve() != Path("/")}
    # A path inside another hidden one is hidden with it (and bwrap could not mount
    # over what the outer tmpfs already hid).
    return sorted(path for path in resolved if not any(other in path.parents for other in resolved))
