"""A local HTTP server answering like Cisco NDFC's login and top-down LAN fabric
VRF attachment/deployment API."""

from __future__ import annotations

import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.support.servers import reply_json

API = "/appcenter/cisco/ndfc/api/v1/lan-fabric/rest/top-down/fabrics/"


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def _reply(self, status, body=None):
        reply_json(self, status, body)

    def do_POST(self):
        fake = self.server.fake
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
        if self.path == "/login":
            return self._reply(*fake.login(body))
        auth = self.headers.get("Authorization", "")
        if auth.removeprefix("Bearer ") not in fake.tokens:
            return self._reply(401, {"message": "session expired"})
        prefix = f"{API}{fake.fabric}"
        if self.path == f"{prefix}/vrfs/attachments":
            fake.attach(body)
            return self._reply(200, {"status": "success"})
        if self.path == f"{prefix}/vrfs/deployments":
            fake.deployed.append(body["vrfNames"])
            return self._reply(200, {"status": "Deployment of VRF(s) has been initiated successfully"})
        return self._reply(404, {"message": "not found"})

    def log_message(self, *args):
        pass


class _Server(ThreadingHTTPServer):
    def __init__(self, fake: FakeNdfc):
        self.fake = fake
        super().__init__(("127.0.0.1", 0), _Handler)


class FakeNdfc:
    def __init__(self, user="admin", password="pw", fabric="gpu-fabric", attach_seconds: float = 0.0):
        self.user, self.password, self.fabric = user, password, fabric
        self.attach_seconds = attach_seconds  # how long NDFC takes to answer an attachment
        self.attachment_requests = 0
        self.tokens: set[str] = set()
        self.attachments: dict[tuple[str, str], dict] = {}  # (serial, interface) -> attachment
        self.deployed: list[str] = []
        self.logins = 0
        self.server = _Server(self)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def login(self, body: dict) -> tuple[int, dict]:
        """A session token for the right credentials; the status and body to answer."""
        if body.get("userName") != self.user or body.get("userPasswd") != self.password:
            return 401, {"message": "bad credentials"}
        self.logins += 1
        token = secrets.token_hex(16)
        self.tokens.add(token)
        return 200, {"jwttoken": token}

    def attach(self, body: list[dict]) -> None:
        """Attach (or detach) the VRFs on the switch ports the request lists."""
        self.attachment_requests += 1
        time.sleep(self.attach_seconds)
        for item in body:
            for lan in item["lanAttachList"]:
                key = (lan["serialNumber"], lan["torPorts"])
                if lan["deployment"]:
                    self.attachments[key] = {"vrf": lan["vrfName"], "vlan": lan["vlan"]}
                elif self.attachments.get(key, {}).get("vrf") == lan["vrfName"]:
                    del self.attachments[key]

    def expire_sessions(self) -> None:
        self.tokens.clear()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
