from django.urls import path

from apps.runtime.api import agent

urlpatterns = [
    path("enroll", agent.EnrollView.as_view(), name="agent-enroll"),
    path("heartbeat", agent.HeartbeatView.as_view(), name="agent-heartbeat"),
    path("telemetry", agent.TelemetryView.as_view(), name="agent-telemetry"),
    path("instances/<uuid:instance_id>/logs", agent.InstanceLogsView.as_view(), name="agent-instance-logs"),
    path("tasks", agent.fetch_tasks, name="agent-tasks"),
    path("tasks/<uuid:task_id>/report", agent.TaskReportView.as_view(), name="agent-task-report"),
    path("tasks/<uuid:task_id>/secrets", agent.TaskSecretsView.as_view(), name="agent-task-secrets"),
]
