from django.urls import path

from apps.runtime.api import views

base = "projects/<uuid:project_pk>/app-instances"
urlpatterns = [
    path(base, views.InstanceListView.as_view(), name="instance-list"),
    path(f"{base}/<uuid:pk>", views.InstanceDetailView.as_view(), name="instance-detail"),
    path(
        f"{base}/<uuid:pk>/stop", views.InstanceActionView.as_view(action_name="stop"), name="instance-stop"
    ),
    path(
        f"{base}/<uuid:pk>/start",
        views.InstanceActionView.as_view(action_name="start"),
        name="instance-start",
    ),
    path(f"{base}/<uuid:pk>/share", views.InstanceShareView.as_view(), name="instance-share"),
    path(f"{base}/<uuid:pk>/events", views.InstanceEventListView.as_view(), name="instance-events"),
    path(f"{base}/<uuid:pk>/logs", views.InstanceLogListView.as_view(), name="instance-logs"),
    path("operations/<uuid:pk>", views.OperationDetailView.as_view(), name="operation-detail"),
]
