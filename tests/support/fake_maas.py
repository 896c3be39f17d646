"""A local HTTP server answering like MAAS's REST API 2.0 for the machines the
driver uses: list, read, allocate, deploy, release, power. Requests must carry
MAAS's OAuth1 PLAINTEXT signature for the configured API key."""

from __future__ import annotations

import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from tests.support.servers import reply_json

_OAUTH = re.compile(r'(\w+)="([^"]*)"')


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def _reply(self, status: int, body=None):
        reply_json(self, status, body)

    def _authorized(self) -> bool:
        fake = self.server.fake
        header = self.headers.get("Authorization", "")
        fields = dict(_OAUTH.findall(header))
        return (
            header.startswith("OAuth ")
            and fields.get("oauth_signature_method") == "PLAINTEXT"
            and fields.get("oauth_consumer_key") == fake.consumer_key
            and fields.get("oauth_token") == fake.token_key
            and fields.get("oauth_signature") == f"&{fake.token_secret}"
            and fields.get("oauth_nonce")
            and fields.get("oauth_timestamp")
        )

    def _form(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        return {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()} if length else {}

    def _handle(self, method):
        fake = self.server.fake
        url = urlparse(self.path)
        op = parse_qs(url.query).get("op", [None])[0]
        form = self._form()
        fake.calls.append((method, url.path, op, form))
        if not self._authorized():
            return self._reply(401, {"error": "Authorization required"})
        if fake.fail_next:
            return self._reply(fake.fail_next.pop(0), {"error": "injected"})
        match = re.fullmatch(r"/MAAS/api/2\.0/machines/(?:([\w-]+)/)?", url.path)
        if not match:
            return self._reply(404, {"error": "not found"})
        system_id = match.group(1)
        if system_id is None:
            return self._reply(*fake.on_machines(method, op, form))
        machine = fake.machines.get(system_id)
        if machine is None:
            return self._reply(404, {"error": "No machine matches"})
        if method == "GET":
            return self._reply(200, fake.view(machine))
        return self._reply(*fake.on_machine(machine, op, form))

    def do_GET(self):
        self._handle("GET")

    def do_POST(self):
        self._handle("POST")

    def log_message(self, *args):
        pass


class _Server(ThreadingHTTPServer):
    def __init__(self, fake: FakeMaas):
        self.fake = fake
        super().__init__(("127.0.0.1", 0), _Handler)


class FakeMaas:
    def __init__(self, api_key: str = "ck:tk:ts", deploy_seconds: float = 0.2):
        self.consumer_key, self.token_key, self.token_secret = api_key.split(":")
        self.api_key = api_key
        self.deploy_seconds = deploy_seconds
        self.machines: dict[str, dict] = {}
        self.calls: list[tuple[str, str, str | None, dict]] = []
        self.fail_next: list[int] = []  # status codes to answer instead of the next calls
        self.server = _Server(self)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/MAAS"

    def on_machines(self, method: str, op: str | None, form: dict) -> tuple[int, object]:
        """``machines/``: the list, or an allocation; the status and body to answer."""
        if method == "GET":
            return 200, [self.view(m) for m in self.machines.values()]
        if op != "allocate":
            return 400, {"error": "unknown op"}
        machine = self.machines.get(form.get("system_id", ""))
        if machine is None or machine["status_name"] != "Ready":
            return 409, {"error": "No machine available"}
        machine["status_name"] = "Allocated"
        return 200, self.view(machine)

    def on_machine(self, machine: dict, op: str | None, form: dict) -> tuple[int, object]:
        """An operation on one machine; the status and body to answer."""
        if op == "deploy":
            if machine["status_name"] != "Allocated":
                return 409, {"error": f"cannot deploy from {machine['status_name']}"}
            machine.update(
                status_name="Deploying",
                power_state="on",
                distro_series=form.get("distro_series"),
                user_data=form.get("user_data"),
                done_at=time.monotonic() + self.deploy_seconds,
                then="Deployed",
            )
        elif op == "release":
            erase = form.get("erase") == "true"
            machine.update(
                status_name="Disk erasing" if erase else "Releasing",
                done_at=time.monotonic() + self.deploy_seconds,
                then="Ready",
            )
        elif op in ("power_on", "power_off"):
            machine["power_state"] = op.removeprefix("power_")
        else:
            return 400, {"error": "unknown op"}
        return 200, self.view(machine)

    def add_machine(self, hostname: str, system_id: str) -> None:
        self.machines[system_id] = {
            "system_id": system_id,
            "hostname": hostname,
            "status_name": "Ready",
            "power_state": "off",
        }

    def view(self, machine: dict) -> dict:
        if machine.get("done_at") and time.monotonic() >= machine["done_at"]:
            machine["status_name"] = machine.pop("then")
            machine.pop("done_at")
            if machine["status_name"] == "Ready":
                machine["power_state"] = "off"
        return {
            k: v
            for k, v in machine.items()
            if k in ("system_id", "hostname", "status_name", "power_state", "distro_series")
        }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
