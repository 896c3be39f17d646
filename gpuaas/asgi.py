"""ASGI entry point: the platform proxy for app routes, Django for HTTP, Channels for WebSockets."""

import gc
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuaas.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from apps.core.body_limit import RequestBodyLimit  # noqa: E402
from apps.core.origins import PortalOriginValidator  # noqa: E402
from apps.proxy.dataplane.dispatch import ProxyDispatcher  # noqa: E402
from gpuaas.routing import agent_websocket_urlpatterns, by_caller, websocket_urlpatterns  # noqa: E402

# The proxy sees route traffic before Django's middleware, so nothing buffers it.
application = ProxyDispatcher(
    ProtocolTypeRouter(
        {
            "http": RequestBodyLimit(django_asgi_app),
            "websocket": by_caller(
                PortalOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
                URLRouter(agent_websocket_urlpatterns),
            ),
        }
    )
)

# Everything loaded so far lives as long as the process: out of the collector's
# way, a full collection walks only what requests leave behind (a full collection
# over Django's import graph paused the proxy for tens of milliseconds).
gc.freeze()
