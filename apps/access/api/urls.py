from django.urls import path

from apps.access.api import views

allocation = "projects/<uuid:project_pk>/allocations/<uuid:pk>"
v1_urlpatterns = [
    path(f"{allocation}/access", views.AllocationAccessView.as_view(), name="allocation-access"),
    path(f"{allocation}/authorized-keys", views.AuthorizedKeyListView.as_view(), name="authorized-key-list"),
    path(
        f"{allocation}/authorized-keys/<uuid:kid>",
        views.AuthorizedKeyDetailView.as_view(),
        name="authorized-key-detail",
    ),
    path("profile/ssh-keys", views.ProfileKeyListView.as_view(), name="profile-ssh-key-list"),
    path("profile/ssh-keys/<uuid:kid>", views.ProfileKeyDetailView.as_view(), name="profile-ssh-key-detail"),
]
agent_urlpatterns = [
    path("access", views.AgentAccessView.as_view(), name="agent-access"),
]
