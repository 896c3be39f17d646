"""A small app that prints: it writes its token and a line to stderr as it starts,
then ``tick N`` to stdout twice a second, and serves HTTP on its endpoint (so the
agent finds it ready). Published like any catalog app, run by a real node agent."""

from __future__ import annotations

from tests.factories import shipped_manifest
from tests.support.catalog import publish

SOURCE = """
import http.server, os, sys, threading, time
print("starting; my token is " + os.environ["APP_TOKEN"], flush=True)
print("a warning on stderr", file=sys.stderr, flush=True)
print("x" * 4500, flush=True)
def ticks():
    n = 0
    while True:
        n += 1
        print(f"tick {n}", flush=True)
        time.sleep(0.5)
threading.Thread(target=ticks, daemon=True).start()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer((sys.argv[1], int(sys.argv[2])), Handler).serve_forever()
"""


def publish_chatty():
    """The app ``chatty``: JupyterLab's manifest with this program as its process."""
    manifest = shipped_manifest("jupyterlab")
    manifest["summary"] = "Prints a line twice a second."
    manifest["process"] = {
        "command": ["python", "-c", SOURCE, "{{ node.address }}", "{{ port.web }}"],
        "env": {"APP_TOKEN": "{{ secret.token }}"},
        "ready_path": "/ready",
    }
    return publish("chatty", manifest, name="Chatty")
