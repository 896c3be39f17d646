from django.contrib.auth import views as auth_views
from django.urls import path

from apps.portal import views

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("accounts/login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
]
