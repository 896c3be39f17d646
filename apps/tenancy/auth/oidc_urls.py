from django.urls import path

from apps.tenancy.auth import oidc

urlpatterns = [
    path("authenticate/", oidc.AuthenticationRequestView.as_view(), name="oidc_authentication_init"),
    path("callback/", oidc.AuthenticationCallbackView.as_view(), name="oidc_authentication_callback"),
    path("logout/", oidc.LogoutView.as_view(), name="oidc_logout"),
]
