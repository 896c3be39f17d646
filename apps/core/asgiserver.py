"""How uvicorn serves the portal and the proxy: ``manage.py serve`` and the test
servers use the same options, so the tests run what production runs."""

from __future__ import annotations

from django.conf import settings

OPTIONS = {
    "ws": "websockets-sansio",  # supports the WebSocket denial response the proxy sends
    "ws_max_size": settings.PROXY_WEBSOCKET_MAX_MESSAGE_BYTES,  # a browser's message
    "log_config": None,  # Django's LOGGING configures logging
    "access_log": False,  # the portal and the proxy write their own access lines
    "lifespan": "off",
}
