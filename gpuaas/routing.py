"""WebSocket routes; each domain app contributes its consumers here."""

from apps.access.routing import agent_websocket_urlpatterns as access_agent_ws
from apps.access.routing import websocket_urlpatterns as access_ws
from apps.allocations.routing import websocket_urlpatterns as allocations_ws
from apps.core.outages import websockets_answer_503
from apps.runtime.routing import websocket_urlpatterns as runtime_ws

# The browser's sockets: the portal's session and origin checks apply.
websocket_urlpatterns = [*allocations_ws, *runtime_ws, *access_ws]

# The node agents' sockets: authenticated by node credential, never by a browser.
AGENT_PREFIX = "/ws/agent/"
agent_websocket_urlpatterns = [*access_agent_ws]


def by_caller(browser_app, agent_app):
    """The ASGI app for WebSockets: the agent's paths to ``agent_app``, the rest to
    ``browser_app``; either answers 503 while a dependency is down."""

    async def route(scope, receive, send):
        app = agent_app if scope["path"].startswith(AGENT_PREFIX) else browser_app
        return await app(scope, receive, send)

    return websockets_answer_503(route)
