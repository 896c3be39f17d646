from django.urls import path

from apps.runtime.consumers import ProjectInstancesConsumer

websocket_urlpatterns = [
    path("ws/projects/<uuid:project_id>/instances/", ProjectInstancesConsumer.as_asgi()),
]
