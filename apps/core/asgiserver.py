"""How uvicorn serves the portal and the proxy: ``manage.py serve`` and the test
servers use the same options, so the tests run what production runs."""

from __future__ import annotations

# The largest WebSocket message a browser may send (uvicorn closes with 1009 beyond)
# and, in the proxy, that an app may send: a message is held whole before it is
# relayed. Jupyter's own server takes 10 MiB at most.
WEBSOCKET_MAX_MESSAGE_BYTES = 16 * 1024 * 1024

OPTIONS = {
    "ws": "websockets-sansio",  # supports the WebSocket denial response the proxy sends
    "ws_max_size": WEBSOCKET_MAX_MESSAGE_BYTES,
    "log_config": None,  # Django's LOGGING configures logging
    "access_log": False,  # the portal and the proxy write their own access lines
    "lifespan": "off",
    # uvicorn's default, named because docker/nginx.conf's upstreams must let go of an
    # idle connection before this closes it.
    "timeout_keep_alive": 5,
}
