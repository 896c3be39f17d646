from django.urls import path

from apps.allocations.consumers import ProjectAllocationsConsumer

websocket_urlpatterns = [
    path("ws/projects/<uuid:project_id>/allocations/", ProjectAllocationsConsumer.as_asgi()),
]
