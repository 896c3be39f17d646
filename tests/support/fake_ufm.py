"""A local HTTP server answering like NVIDIA UFM Enterprise's PKey REST API
(``/ufmRest/resources/pkeys``): list, read, create empty, add GUIDs, remove GUIDs,
delete; basic authentication on ``/ufmRest``, an access token on ``/ufmRestV3``."""

from __future__ import annotations

import base64
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

from tests.support.servers import reply_json

_PKEY = re.compile(r"^0x[0-9a-f]{1,4}$")
_GUID = re.compile(r"^[0-9a-f]{16}$")


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def _reply(self, status, body=None):
        reply_json(self, status, body)

    def _route(self) -> str | None:
        """The path under ``resources/pkeys`` when the request is authenticated, else None."""
        fake = self.server.fake
        path = urlparse(self.path).path
        header = self.headers.get("Authorization", "")
        basic = f"Basic {base64.b64encode(f'{fake.user}:{fake.password}'.encode()).decode()}"
        if path.startswith("/ufmRest/resources/pkeys") and header == basic:
            return path.removeprefix("/ufmRest/resources/pkeys")
        if path.startswith("/ufmRestV3/resources/pkeys") and header == f"Basic {fake.token}":
            return path.removeprefix("/ufmRestV3/resources/pkeys")
        return None

    def _handle(self, method: str):
        fake = self.server.fake
        route = self._route()
        if route is None:
            return self._reply(401, {"error": "Unauthorized"})
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        fake.calls.append((method, route, body))
        if fake.fail_next:
            return self._reply(fake.fail_next.pop(0), {"error": "UFM is busy"})
        with fake.lock:
            return self._reply(*fake.answer(method, route, body))

    def do_GET(self):
        self._handle("GET")

    def do_POST(self):
        self._handle("POST")

    def do_DELETE(self):
        self._handle("DELETE")

    def log_message(self, *args):
        pass


class _Server(ThreadingHTTPServer):
    def __init__(self, fake: FakeUfm):
        self.fake = fake
        super().__init__(("127.0.0.1", 0), _Handler)


class FakeUfm:
    def __init__(self, user="admin", password="pw", token="ufm-token"):
        self.user, self.password, self.token = user, password, token
        self.pkeys: dict[str, dict] = {}  # "0x0101" -> {"guids": {guid: membership}, ...}
        self.calls: list[tuple[str, str, dict | None]] = []
        self.fail_next: list[int] = []  # statuses the next requests answer with
        self.lock = threading.Lock()
        self.server = _Server(self)
        # A short poll interval: close() (shutdown) returns in ~50 ms instead of 500 ms.
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def guids(self, pkey: str) -> set[str]:
        return set(self.pkeys[pkey]["guids"])

    def answer(self, method: str, route: str, body) -> tuple[int, dict | None]:
        if method == "GET" and route in ("", "/"):
            return 200, {name: self._view(name) for name in self.pkeys}
        if method in ("GET", "DELETE") and route.startswith("/0x"):
            name = route[1:]
            if name not in self.pkeys:
                return 404, {"error": f"PKey {name} not found"}
            if method == "DELETE":
                del self.pkeys[name]
                return 200, None
            return 200, self._view(name)
        if method != "POST" or not isinstance(body, dict) or not _PKEY.match(str(body.get("pkey", ""))):
            return 400, {"error": "pkey must be a hex string such as 0x0a12"}
        return self._post(route, body)

    def _post(self, route: str, body: dict) -> tuple[int, dict | None]:
        name, guids = body["pkey"], body.get("guids", [])
        if route == "/add":
            if name in self.pkeys:
                return 400, {"error": f"PKey {name} already exists"}
            self.pkeys[name] = {"guids": {}, "ip_over_ib": body.get("ip_over_ib", True)}
            return 200, None
        if not isinstance(guids, list) or not guids or not all(_GUID.match(str(g)) for g in guids):
            return 400, {"error": "guids must be a list of 16 hex digit GUIDs"}
        if route == "/":
            entry = self.pkeys.setdefault(name, {"guids": {}, "ip_over_ib": body.get("ip_over_ib", True)})
            entry["guids"].update(dict.fromkeys(guids, body.get("membership", "full")))
            return 200, None
        if route == "/delete":
            if name not in self.pkeys:
                return 404, {"error": f"PKey {name} not found"}
            for guid in guids:
                self.pkeys[name]["guids"].pop(guid, None)
            return 200, None
        return 404, {"error": "not found"}

    def _view(self, name: str) -> dict:
        entry = self.pkeys[name]
        return {
            "partition": f"pkey_{name}",
            "ip_over_ib": entry["ip_over_ib"],
            "guids": [{"guid": guid, "membership": m, "index0": False} for guid, m in entry["guids"].items()],
        }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
