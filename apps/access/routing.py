from django.urls import path

from apps.access.consumers import AgentControlConsumer, AgentTerminalConsumer, BrowserTerminalConsumer

websocket_urlpatterns = [
    path("ws/allocations/<uuid:allocation_id>/terminal/", BrowserTerminalConsumer.as_asgi()),
]

# Opened by node agents with their node credential: no browser session, no Origin.
agent_websocket_urlpatterns = [
    path("ws/agent/v1/terminals/", AgentControlConsumer.as_asgi()),
    path("ws/agent/v1/terminal/<uuid:session_id>/", AgentTerminalConsumer.as_asgi()),
]
