"""Stand-ins for Lustre's ``lfs`` and ``lctl`` as an MGS runs them, for the fake DDN
(tests/support/fake_ddn.py): the MGS's ``lfs`` and ``lctl`` are bash stubs that hand
their arguments to a ``ToolServer`` in the test's process, and print what it answers.

They keep real state in ``state.json`` of their directory (directories with project
ids and quotas, used bytes, NodeMaps with filesets, properties and NID ranges), print
what the real tools print for the subcommands the driver uses, and fail as they do on
bad input (Lustre's own rules: NodeMap names, NIDs, quota units). A test makes trouble
through the same state: ``fail_next`` (an errno text the next command fails with),
``hang_seconds``, ``df_ms`` (how long ``lfs df`` takes).

Without Django on purpose: nothing of the platform answers for the MGS.
"""

from __future__ import annotations

import argparse
import fcntl
import ipaddress
import json
import re
import shlex
import socketserver
import threading
import time
from contextlib import contextmanager, suppress
from pathlib import Path

MOUNT = "/lustre"
_NODEMAP_NAME = re.compile(r"^[A-Za-z0-9_]{1,16}$")  # Lustre's nodemap_name_is_valid
_LIMIT = re.compile(r"^(\d+)([kKmMgGtTpP]?)$")
_QUOTA_COLUMNS = "     Filesystem  kbytes   quota   limit   grace   files   quota   limit   grace"
_UNITS = {"": 1, "k": 1, "m": 2**10, "g": 2**20, "t": 2**30, "p": 2**40}  # in KiB, as lfs counts


class Failed(Exception):
    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


@contextmanager
def _state(root: Path):
    with open(root / "state.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = root / "state.json"
        state = json.loads(path.read_text()) if path.exists() else {}
        state.setdefault("directories", {})
        state.setdefault("nodemaps", {})
        state.setdefault("active", False)
        yield state
        path.write_text(json.dumps(state, indent=1, sort_keys=True))


def _directory(state: dict, path: str, tool: str) -> dict:
    path = path.rstrip("/")
    if path not in state["directories"]:
        raise Failed(f"{tool}: failed to open '{path}': No such file or directory (2)", 2)
    return state["directories"][path]


def _kib(limit: str) -> int:
    match = _LIMIT.match(limit)
    if not match:
        raise Failed(f"lfs setquota: bad block hard limit '{limit}'", 22)
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def lfs(state: dict, argv: list[str]) -> str:
    command, rest = (argv[0], argv[1:]) if argv else ("", [])
    if command in ("mkdir", "setdirstripe"):
        path = rest[-1].rstrip("/") if rest else ""
        if not path.startswith(f"{MOUNT}/") or "/" in path[len(MOUNT) + 1 :]:
            raise Failed(f"lfs {command}: cannot create dir '{path}': No such file or directory", 2)
        if path in state["directories"]:
            raise Failed(f"lfs {command}: dirstripe error on '{path}': File exists", 17)
        state["directories"][path] = {"project": 0, "inherit": False, "used_bytes": 0}
        return ""
    if command == "project":
        parser = argparse.ArgumentParser(prog="lfs project", add_help=False)
        parser.add_argument("-p", type=int)
        parser.add_argument("-s", action="store_true")
        parser.add_argument("-r", action="store_true")
        parser.add_argument("-d", action="store_true")
        parser.add_argument("path")
        args = _parse(parser, rest)
        entry = _directory(state, args.path, "lfs project")
        if args.p is not None:
            entry["project"], entry["inherit"] = args.p, args.s or entry["inherit"]
            return ""
        return f"{entry['project']:5d} {'P' if entry['inherit'] else '-'} {args.path.rstrip('/')}\n"
    if command in ("setquota", "quota"):
        parser = argparse.ArgumentParser(prog=f"lfs {command}", add_help=False)
        parser.add_argument("-p", type=int, required=True)
        parser.add_argument("-B")
        parser.add_argument("-q", action="store_true")
        parser.add_argument("path")
        args = _parse(parser, rest)
        if not args.path.startswith(MOUNT):
            raise Failed(f"lfs {command}: '{args.path}' is not on a Lustre file system", 22)
        owned = [d for d in state["directories"].values() if d["project"] == args.p]
        if command == "setquota":
            if args.B is None:
                raise Failed("lfs setquota: at least one limit must be specified", 22)
            state.setdefault("project_limits", {})[str(args.p)] = _kib(args.B)
            return ""
        used_kib = sum(-(-d["used_bytes"] // 1024) for d in owned)
        limit = state.get("project_limits", {}).get(str(args.p), 0)
        mark = "*" if limit and used_kib > limit else ""
        header = "" if args.q else f"Disk quotas for prj {args.p} (pid {args.p}):\n{_QUOTA_COLUMNS}\n"
        return f"{header}{args.path:>15} {used_kib}{mark} 0 {limit} - {len(owned)} 0 0 -\n"
    if command == "df":
        time.sleep(state.get("df_ms", 0) / 1000)
        return (
            "UUID                   1K-blocks        Used   Available Use% Mounted on\n"
            "lustre-MDT0000_UUID      1000000        1000      999000   1% /lustre[MDT:0]\n"
            "lustre-OST0000_UUID    100000000     1000000    99000000   1% /lustre[OST:0]\n"
        )
    raise Failed(f"lfs: unknown command '{command}'", 22)


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    try:
        args, extra = parser.parse_known_args(argv)
    except SystemExit:
        raise Failed(f"{parser.prog}: invalid arguments: {' '.join(argv)}", 22) from None
    if extra:
        raise Failed(f"{parser.prog}: invalid option '{extra[0]}'", 22)
    return args


def _nid(text: str) -> str:
    address, _, net = text.partition("@")
    try:
        ipaddress.IPv4Address(address)
    except ValueError:
        raise Failed(f"error: invalid nid '{text}'", 22) from None
    if not re.match(r"^(o2ib|tcp)\d*$", net):
        raise Failed(f"error: invalid nid '{text}'", 22)
    return text


def lctl(state: dict, argv: list[str]) -> str:
    command, rest = (argv[0], argv[1:]) if argv else ("", [])
    if command == "nodemap_activate":
        if rest not in (["0"], ["1"]):
            raise Failed("usage: nodemap_activate <0|1>", 22)
        state["active"] = rest == ["1"]
        return ""
    if command in ("nodemap_add", "nodemap_del"):
        return _add_or_del(state["nodemaps"], command, rest[0] if rest else "")
    if command == "nodemap_test_nid":
        nid = _nid(rest[0] if rest else "")
        return next((n for n, m in sorted(state["nodemaps"].items()) if nid in m["ranges"]), "default") + "\n"
    parser = argparse.ArgumentParser(prog=f"lctl {command}", add_help=False)
    parser.add_argument("--name", required=True)
    parser.add_argument("--fileset")
    parser.add_argument("--property")
    parser.add_argument("--value")
    parser.add_argument("--range")
    args = _parse(parser, rest)
    if args.name not in state["nodemaps"]:
        raise Failed(f"error: {command}: nodemap '{args.name}': No such file or directory", 2)
    nodemap = state["nodemaps"][args.name]
    if command == "nodemap_set_fileset" and args.fileset and args.fileset.startswith("/"):
        nodemap["fileset"] = args.fileset
    elif command == "nodemap_modify" and args.property in ("admin", "trusted") and args.value in ("0", "1"):
        nodemap[args.property] = int(args.value)
    elif command in ("nodemap_add_range", "nodemap_del_range") and args.range:
        _range(state["nodemaps"], nodemap, command, _nid(args.range))
    else:
        raise Failed(f"error: {command}: Invalid argument", 22)
    return ""


def _add_or_del(nodemaps: dict, command: str, name: str) -> str:
    if not _NODEMAP_NAME.match(name):
        raise Failed(f"error: {command}: cannot add nodemap '{name}': Invalid argument", 22)
    if command == "nodemap_add":
        if name in nodemaps:
            raise Failed(f"error: nodemap_add: cannot add nodemap '{name}': File exists", 17)
        nodemaps[name] = {"fileset": "", "admin": 0, "trusted": 0, "ranges": []}
    elif nodemaps.pop(name, None) is None:
        raise Failed(f"error: nodemap_del: cannot del nodemap '{name}': No such file or directory", 2)
    return ""


def _range(nodemaps: dict, nodemap: dict, command: str, nid: str) -> None:
    """A NID joins (or leaves) a NodeMap; Lustre refuses one that any NodeMap has."""
    if command == "nodemap_add_range":
        if any(nid in m["ranges"] for m in nodemaps.values()):
            raise Failed(f"error: nodemap_add_range: cannot add range '{nid}': File exists", 17)
        nodemap["ranges"].append(nid)
    elif nid in nodemap["ranges"]:
        nodemap["ranges"].remove(nid)
    else:
        raise Failed(f"error: nodemap_del_range: cannot del range '{nid}': Invalid argument", 22)


def run(root: Path, argv: list[str]) -> tuple[int, str, str]:
    """One ``lfs`` or ``lctl`` command on the state in ``root``: exit code, stdout, stderr."""
    tool, args = argv[0], argv[1:]
    with open(root / "calls.log", "a") as log:
        log.write(json.dumps([tool, *args]) + "\n")
    try:
        with _state(root) as state:
            hang = state.get("hang_seconds", 0)
            failure = state.pop("fail_next", None)
        time.sleep(hang)
        if failure:
            raise Failed(f"{tool} {args[0] if args else ''}: {failure}", 11)
        with _state(root) as state:
            output = {"lfs": lfs, "lctl": lctl}[tool](state, args)
    except Failed as exc:
        return exc.code, "", f"{exc}\n"
    return 0, output, ""


# The MGS's lfs and lctl: they send their arguments (a count, then each one, NUL-ended)
# and run the shell text that comes back. A Python process per command cost 40 ms of
# CPU, half of what the storage tests spent (2026-11-29); bash and a socket cost ~2.
STUB = """#!/bin/bash
exec 3<>/dev/tcp/127.0.0.1/{port} || exit 1
printf '%s\\0' "$(($# + 1))" {tool} "$@" >&3
IFS= read -r -d '' answer <&3 || exit 70
eval "$answer"
"""


class ToolServer(socketserver.ThreadingTCPServer):
    """Runs the stubs' commands on the state in ``root``, each in a thread of its own
    (``hang_seconds`` holds only its command), until ``close``."""

    daemon_threads = True

    def __init__(self, root: Path):
        self.root = root
        super().__init__(("127.0.0.1", 0), _Command)
        # A short poll interval: close() (shutdown) returns in ~50 ms instead of 500 ms.
        threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-lustre", daemon=True
        ).start()

    @property
    def port(self) -> int:
        return self.server_address[1]

    def stub(self, tool: str) -> str:
        return STUB.format(port=self.port, tool=tool)

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _Command(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        fields = self.rfile.read1(65536).split(b"\0")
        while len(fields) < 2 or len(fields) <= int(fields[0]) + 1:
            more = self.rfile.read1(65536)
            if not more:
                return
            fields[-1:] = (fields[-1] + more).split(b"\0")
        argv = [field.decode() for field in fields[1 : int(fields[0]) + 1]]
        try:
            code, out, err = run(self.server.root, argv)
        except Exception as exc:  # noqa: BLE001 - a bug of the fake fails the command, not silently
            code, out, err = 70, "", f"fake {argv[0]}: {exc!r}\n"
        answer = f"printf %s {shlex.quote(out)}; printf %s {shlex.quote(err)} >&2; exit {code}"
        with suppress(OSError):  # the stub is gone: its caller gave up on a hang
            self.wfile.write(answer.encode() + b"\0")
