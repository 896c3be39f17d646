"""WebSocket routes of the portal's live pages."""

websocket_urlpatterns: list = []
