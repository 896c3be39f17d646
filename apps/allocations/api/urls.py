from django.urls import path

from apps.allocations.api import views

ccp_urlpatterns = [
    path("baremetal-manager/flavors", views.FlavorListView.as_view(), name="bm-flavors"),
    path("baremetal-manager/allocate", views.AllocateView.as_view(), name="bm-allocate"),
    path("baremetal-manager/<uuid:node_id>/status", views.NodeStatusView.as_view(), name="bm-status"),
    path("baremetal-manager/<uuid:node_id>/release", views.NodeReleaseView.as_view(), name="bm-release"),
]

v1_urlpatterns = [
    path(
        "projects/<uuid:project_pk>/allocations",
        views.ProjectAllocationListView.as_view(),
        name="allocation-list",
    ),
    path(
        "projects/<uuid:project_pk>/allocations/<uuid:pk>",
        views.ProjectAllocationDetailView.as_view(),
        name="allocation-detail",
    ),
]
