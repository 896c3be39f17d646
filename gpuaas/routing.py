"""WebSocket routes; each domain app contributes its consumers here."""

from apps.allocations.routing import websocket_urlpatterns as allocations_ws
from apps.runtime.routing import websocket_urlpatterns as runtime_ws

websocket_urlpatterns = [*allocations_ws, *runtime_ws]
