"""``make prod-local``: the production process topology on one machine, from the
virtualenv, against the local PostgreSQL, Redis and Debian's nginx (decision 0062).

    python -m gpuaas.prodlocal [--dir var/prod-local] [--port 8080] [--web-ports 8001,8002]
    python -m gpuaas.prodlocal manage createsuperuser    # manage.py with the topology's settings

The processes of docker/compose.yaml, with its variables: two ``serve`` web processes
behind nginx (the data plane, docker/nginx.conf), a Celery worker and beat, each under
supervisord, which starts it again when it exits (compose's ``restart: unless-stopped``).
The database (``gpuaas_prodlocal`` unless ``DATABASE_URL`` names another) is created
when missing and migrated, the static files collected, and the secrets generated once
into ``<dir>.env``; values in the environment win over that file. The portal is
http://localhost:8080, apps are served on ``*.apps.localhost``, which browsers resolve
to loopback by themselves.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import importlib.metadata
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"
NGINX_TEMPLATE = DOCKER / "nginx.conf"
NGINX_CONF_DIR = DOCKER / "nginx"
_PLACEHOLDER = re.compile(r"\$\{(GPUAAS_[A-Z_]+)\}")

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/gpuaas_prodlocal"
# Database 0 is the embedded default's neighbour on a developer machine, 1 onwards the
# test suite's (tests/settings.py): prod-local keeps to the last one.
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/15"
GENERATED = ("GPUAAS_SECRET_KEY", "GPUAAS_ENCRYPTION_KEYS", "GPUAAS_PROXY_AUTH_SECRET")


def render_nginx(values: dict[str, str]) -> str:
    """docker/nginx.conf with every placeholder filled, as the nginx image's envsubst
    does at start (a missing value is a KeyError)."""
    return _PLACEHOLDER.sub(lambda match: values[match.group(1)], NGINX_TEMPLATE.read_text())


def portal_upstream(addresses: list[str]) -> str:
    """GPUAAS_PORTAL_UPSTREAM naming several web processes: the template's
    ``server ${GPUAAS_PORTAL_UPSTREAM};`` becomes one ``server`` line per address."""
    return "; server ".join(addresses)


def secrets_file(path: Path) -> dict[str, str]:
    """The generated secrets, written the first time (only the owner reads them)."""
    if not path.exists():
        from cryptography.fernet import Fernet

        generated = {
            "GPUAAS_SECRET_KEY": secrets.token_urlsafe(50),
            "GPUAAS_ENCRYPTION_KEYS": Fernet.generate_key().decode(),
            "GPUAAS_PROXY_AUTH_SECRET": secrets.token_urlsafe(32),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as file:
            file.write("# make prod-local's secrets, generated once; keep this file private.\n")
            file.writelines(f"{name}={value}\n" for name, value in generated.items())
    values = {}
    for line in path.read_text().splitlines():
        name, sep, value = line.partition("=")
        if sep and not name.startswith("#"):
            values[name.strip()] = value.strip()
    return values


def environment(state: Path, port: int) -> dict[str, str]:
    """compose.yaml's variables for the app processes, for this machine."""
    origin = f"http://localhost:{port}"
    defaults = {
        "DJANGO_SETTINGS_MODULE": "gpuaas.settings",
        "DATABASE_URL": DEFAULT_DATABASE_URL,
        "REDIS_URL": DEFAULT_REDIS_URL,
        "GPUAAS_DEBUG": "false",
        "GPUAAS_HTTPS": "false",
        "GPUAAS_VAR_DIR": str(state / "var"),
        "GPUAAS_ALLOWED_HOSTS": "localhost,127.0.0.1",
        "GPUAAS_ISSUER": origin,
        "GPUAAS_CSRF_TRUSTED_ORIGINS": origin,
        # Beside the portal's own host, never it: the portal's origin must not be an app's.
        "GPUAAS_APPS_DOMAIN": "apps.localhost",
        "GPUAAS_DRIVERS": "simulated",
        "GPUAAS_SIMULATED_STEP_SECONDS": "2",
        "GPUAAS_CELERY_EAGER": "false",
        # On each process's output, which supervisord keeps in var/prod-local/logs/.
        "GPUAAS_LOG_FORMAT": "json",
    }
    return {**defaults, **secrets_file(state.with_suffix(".env")), **_ours(os.environ)}


def _ours(environ) -> dict[str, str]:
    return {name: value for name, value in environ.items() if name.startswith("GPUAAS_")} | {
        name: environ[name] for name in ("DATABASE_URL", "REDIS_URL") if environ.get(name)
    }


def create_database(url: str) -> None:
    import psycopg
    from psycopg import sql

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    maintenance = parts._replace(path="/postgres").geturl()
    with psycopg.connect(maintenance, autocommit=True) as connection:
        if not connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def command(state: Path, port: int, web_ports: list[int]) -> list[str]:
    """The command that runs the topology with these places (tests and benchmarks run it
    as ``make prod-local`` does, in a process of its own)."""
    ports = ",".join(map(str, web_ports))
    return [
        sys.executable,
        "-m",
        "gpuaas.prodlocal",
        "--dir",
        str(state),
        "--port",
        str(port),
        "--web-ports",
        ports,
    ]


def manage(command: list[str], env: dict[str, str]) -> None:
    """``manage.py command`` with the topology's variables over this process's."""
    subprocess.run([sys.executable, "manage.py", *command], cwd=ROOT, env={**os.environ, **env}, check=True)


def collect_static(env: dict[str, str]) -> None:
    """``collectstatic`` into the static root, unless it holds these sources' files
    already: hashing and compressing them (brotli, when installed) takes minutes, which
    a restart, or another topology sharing ``GPUAAS_STATIC_ROOT``, need not pay again."""
    env = {**os.environ, **env}
    root = Path(env.get("GPUAAS_STATIC_ROOT") or Path(env["GPUAAS_VAR_DIR"]) / "static")
    root.mkdir(parents=True, exist_ok=True)
    stamp = root / ".sources"
    with open(root.with_name(f"{root.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # topologies starting at once collect once
        sources = static_sources()
        if stamp.exists() and stamp.read_text() == sources:
            return
        manage(["collectstatic", "--noinput", "-v", "0"], env)
        stamp.write_text(sources)


def static_sources() -> str:
    """The project's static files as they are now, and the installed packages (whose
    static files, the admin's and the API docs', change only with their versions)."""
    digest = hashlib.sha256()
    for path in sorted((ROOT / "static").rglob("*")):
        if path.is_file():
            status = path.stat()
            digest.update(f"{path.relative_to(ROOT)} {status.st_size} {status.st_mtime_ns}\n".encode())
    # A set: with the checkout itself on sys.path (``python -m``, ``-c``) its egg-info
    # names the project a second time, and two processes of one test run disagreed and
    # collected again under a server reading the files.
    for package in sorted({f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions()}):
        digest.update(f"{package}\n".encode())
    return digest.hexdigest()


def supervisord_conf(state: Path, web_ports: list[int], worker_concurrency: str = "2") -> str:
    """One program per process of compose.yaml; every one started again when it exits.
    Each runs in its own process group, which stopping (or a kill) ends whole."""
    python = sys.executable
    programs = {
        f"web{index}": f"{python} manage.py serve --host 127.0.0.1 --port {port}"
        for index, port in enumerate(web_ports, 1)
    }
    celery = f"{python} -m celery -A gpuaas"
    programs["worker"] = f"{celery} worker -l info --concurrency {worker_concurrency} --hostname worker@%%h"
    programs["beat"] = f"{celery} beat -l info --schedule {state / 'celerybeat-schedule'}"
    nginx = state / "nginx"
    programs["nginx"] = f"/usr/sbin/nginx -p {nginx} -c {nginx / 'nginx.conf'} -e stderr -g 'daemon off;'"
    logs = state / "logs"
    sections = [
        "[supervisord]",
        "nodaemon=true",
        f"logfile={logs / 'supervisord.log'}",
        f"pidfile={state / 'supervisord.pid'}",
        f"childlogdir={logs}",
        "",
        "[unix_http_server]",
        f"file={state / 'supervisor.sock'}",
        "chmod=0700",
        "",
        "[supervisorctl]",
        f"serverurl=unix://{state / 'supervisor.sock'}",
        "",
        "[rpcinterface:supervisor]",
        "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface",
    ]
    for name, command in programs.items():
        sections += [
            "",
            f"[program:{name}]",
            f"command={command}",
            f"directory={ROOT}",
            "autorestart=true",
            # A process that fails at start (its database not there yet) is tried again,
            # a second longer apart each time, for days: as compose restarts a container.
            "startsecs=1",
            "startretries=1000",
            "stopasgroup=true",
            "killasgroup=true",
            # As compose's stop_grace_period: running tasks finish (acks-late redelivers the rest).
            f"stopwaitsecs={60 if name == 'worker' else 15}",
            f"stopsignal={'QUIT' if name == 'nginx' else 'TERM'}",
            "redirect_stderr=true",
            f"stdout_logfile={logs / (name + '.log')}",
            "stdout_logfile_maxbytes=10MB",
            "stdout_logfile_backups=2",
        ]
    return "\n".join(sections) + "\n"


def prepare(state: Path, port: int, web_ports: list[int], env: dict[str, str]) -> Path:
    """The database, static files and configuration; returns supervisord's configuration."""
    (state / "logs").mkdir(parents=True, exist_ok=True)
    (state / "nginx").mkdir(exist_ok=True)
    create_database(env["DATABASE_URL"])
    manage(["migrate", "--noinput"], env)
    collect_static(env)
    (state / "nginx" / "nginx.conf").write_text(
        render_nginx(
            {
                "GPUAAS_NGINX_LISTEN": f"127.0.0.1:{port}",
                "GPUAAS_NGINX_STATE_DIR": str(state / "nginx"),
                "GPUAAS_NGINX_CONF_DIR": str(NGINX_CONF_DIR),
                "GPUAAS_PORTAL_UPSTREAM": portal_upstream([f"127.0.0.1:{web}" for web in web_ports]),
                "GPUAAS_PROXY_AUTH_SECRET": env["GPUAAS_PROXY_AUTH_SECRET"],
                "GPUAAS_APPS_DOMAIN": env["GPUAAS_APPS_DOMAIN"],
                "GPUAAS_ISSUER": env["GPUAAS_ISSUER"],
            }
        )
    )
    conf = state / "supervisord.conf"
    # compose's variable; fewer processes by default on a developer's machine.
    conf.write_text(supervisord_conf(state, web_ports, env.get("GPUAAS_WORKER_CONCURRENCY", "2")))
    return conf


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gpuaas.prodlocal", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default=str(ROOT / "var" / "prod-local"), help="state: logs, configuration")
    parser.add_argument("--port", type=int, default=8080, help="nginx, the portal's address")
    parser.add_argument("--web-ports", default="8001,8002", help="the web processes, behind nginx")
    parser.add_argument("manage", nargs=argparse.REMAINDER, help="manage ARGS: manage.py with these settings")
    args = parser.parse_args(argv)
    state = Path(args.dir).resolve()
    env = environment(state, args.port)
    if args.manage:
        if args.manage[0] != "manage":
            parser.error(f"unknown command {args.manage[0]!r}; expected: manage ARGS")
        os.chdir(ROOT)
        os.execve(sys.executable, [sys.executable, "manage.py", *args.manage[1:]], os.environ | env)  # noqa: S606
    web_ports = [int(port) for port in args.web_ports.split(",")]
    conf = prepare(state, args.port, web_ports, env)
    print(f"GPUaaS production topology on http://localhost:{args.port}/ (logs: {state / 'logs'})", flush=True)
    supervisord = str(Path(sys.executable).parent / "supervisord")
    # Secrets reach the processes through the environment, never a file but <dir>.env.
    os.execve(supervisord, [supervisord, "-c", str(conf)], os.environ | env)  # noqa: S606 - no shell wanted


if __name__ == "__main__":
    main()
