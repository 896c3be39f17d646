from django.urls import path

from apps.allocations.api import agent

urlpatterns = [
    path("enroll", agent.EnrollView.as_view(), name="agent-enroll"),
    path("heartbeat", agent.HeartbeatView.as_view(), name="agent-heartbeat"),
]
