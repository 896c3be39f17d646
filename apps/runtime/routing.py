from django.urls import path

from apps.runtime.consumers import InstanceLogsConsumer, ProjectInstancesConsumer

websocket_urlpatterns = [
    path("ws/projects/<uuid:project_id>/instances/", ProjectInstancesConsumer.as_asgi()),
    path(
        "ws/projects/<uuid:project_id>/instances/<uuid:instance_id>/logs/",
        InstanceLogsConsumer.as_asgi(),
    ),
]
