"""A small app that prints: it writes its token and a line to stderr as it starts,
then ``tick N`` to stdout twice a second, and serves HTTP on its endpoint (so the
agent finds it ready). Published like any catalog app, run by a real node agent."""

from __future__ import annotations

from tests.factories import shipped_manifest
from tests.support.catalog import publish

# Terse: a manifest's argument holds 500 characters at most.
SOURCE = """
import http.server as h,os,sys,threading as t,time
p=lambda *a,**k:print(*a,**k,flush=True)
p("starting; my token is "+os.environ["APP_TOKEN"])
p("a warning on stderr",file=sys.stderr)
p("x"*4500)
def f():
 n=0
 while 1:n+=1;p(f"tick {n}");time.sleep(.5)
t.Thread(target=f,daemon=True).start()
class H(h.BaseHTTPRequestHandler):
 def do_GET(s):s.send_response(200);s.end_headers()
 def log_message(*a):0
h.HTTPServer((sys.argv[1],int(sys.argv[2])),H).serve_forever()
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
