"""WebSocket routes; each domain app contributes its consumers here."""

from apps.portal.routing import websocket_urlpatterns as portal_ws

websocket_urlpatterns = [*portal_ws]
