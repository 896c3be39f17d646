"""API of a project's access credentials and secrets (CONTRACT.md "Host access and secrets").

Neither answers a private key or a secret's value, except the credential's creation
(once) and its delivery to the project's app controller."""

from __future__ import annotations

from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response

from apps.access import services
from apps.access.models import AccessCredential, ProjectSecret
from apps.catalog.manifests import SECRET_NAME
from apps.core.errors import NotFound
from apps.core.idempotency import idempotent
from apps.tenancy.api.base import BaseAPIView, BaseListAPIView, validated
from apps.tenancy.api.views import ProjectScopedMixin
from apps.tenancy.roles import Perm

_NAME_HELP = "Letters, digits, '.', '_' or '-', starting with a letter or digit; at most 64."


class AccessCredentialSerializer(serializers.ModelSerializer):
    class Meta:
        model = AccessCredential
        fields = ["id", "name", "public_key", "fingerprint", "created_by", "created_at"]


class AccessCredentialCreatedSerializer(AccessCredentialSerializer):
    private_key = serializers.CharField(help_text="OpenSSH private key; answered this once only.")

    class Meta(AccessCredentialSerializer.Meta):
        fields = [*AccessCredentialSerializer.Meta.fields, "private_key"]


class NameSerializer(serializers.Serializer):
    name = serializers.RegexField(SECRET_NAME, max_length=64, help_text=_NAME_HELP)


class DeliverSerializer(serializers.Serializer):
    purpose = serializers.CharField(max_length=200, required=False, allow_blank=True)


class KeyPairSerializer(serializers.Serializer):
    private_key = serializers.CharField()
    public_key = serializers.CharField()


class ProjectSecretSerializer(serializers.ModelSerializer):
    class Meta:
        model = ProjectSecret
        fields = ["id", "name", "created_by", "created_at", "updated_at"]


class ProjectSecretWriteSerializer(NameSerializer):
    value = serializers.CharField(write_only=True, trim_whitespace=False, max_length=64 * 1024)


class AccessCredentialListView(ProjectScopedMixin, BaseListAPIView):
    serializer_class = AccessCredentialSerializer

    def get_queryset(self):
        return AccessCredential.objects.filter(project=self.project(Perm.ACCESS_CREDENTIAL_MANAGE))

    @extend_schema(
        request=NameSerializer,
        responses={201: AccessCredentialCreatedSerializer},
        summary="Create an SSH key pair for the project (the private key is answered once)",
    )
    @idempotent
    def post(self, request, project_pk):
        project = self.project(Perm.ACCESS_CREDENTIAL_MANAGE)
        data = validated(NameSerializer, request.data)
        issued = services.create_credential(self.principal, project, name=data["name"])
        body = {**AccessCredentialSerializer(issued.credential).data, "private_key": issued.private_key}
        return Response(body, status=status.HTTP_201_CREATED, headers={"Cache-Control": "no-store"})


class CredentialMixin(ProjectScopedMixin):
    def credential(self, pk) -> AccessCredential:
        found = AccessCredential.objects.filter(project=self.project(), pk=pk).first()
        if found is None:
            raise NotFound()
        return found


class AccessCredentialDetailView(CredentialMixin, BaseAPIView):
    @extend_schema(responses={204: None}, summary="Delete an access credential (its private key too)")
    def delete(self, request, project_pk, pk):
        services.delete_credential(self.principal, self.credential(pk))
        return Response(status=status.HTTP_204_NO_CONTENT)


class AccessCredentialDeliverView(CredentialMixin, BaseAPIView):
    @extend_schema(
        request=DeliverSerializer,
        responses={200: KeyPairSerializer},
        summary="The key pair, to a project_admin service account of the project (the app controller)",
    )
    def post(self, request, project_pk, pk):
        credential = self.credential(pk)
        data = validated(DeliverSerializer, request.data)
        pair = services.deliver_credential(self.principal, credential, purpose=data.get("purpose", ""))
        return Response(pair, headers={"Cache-Control": "no-store"})


class ProjectSecretListView(ProjectScopedMixin, BaseListAPIView):
    serializer_class = ProjectSecretSerializer

    def get_queryset(self):
        return ProjectSecret.objects.filter(project=self.project(Perm.SECRET_MANAGE))

    @extend_schema(
        request=ProjectSecretWriteSerializer,
        responses={201: ProjectSecretSerializer, 200: ProjectSecretSerializer},
        summary="Set a project secret (write-only: its value is never answered); 200 when replaced",
    )
    @idempotent
    def post(self, request, project_pk):
        project = self.project(Perm.SECRET_MANAGE)
        data = validated(ProjectSecretWriteSerializer, request.data)
        secret, created = services.put_secret(self.principal, project, **data)
        return Response(ProjectSecretSerializer(secret).data, status=201 if created else 200)


class ProjectSecretDetailView(ProjectScopedMixin, BaseAPIView):
    @extend_schema(responses={204: None}, summary="Delete a project secret")
    def delete(self, request, project_pk, pk):
        secret = ProjectSecret.objects.filter(project=self.project(Perm.SECRET_MANAGE), pk=pk).first()
        if secret is None:
            raise NotFound()
        services.delete_secret(self.principal, secret)
        return Response(status=status.HTTP_204_NO_CONTENT)


_BASE = "projects/<uuid:project_pk>"
urlpatterns = [
    path(f"{_BASE}/access-credentials", AccessCredentialListView.as_view(), name="access-credential-list"),
    path(
        f"{_BASE}/access-credentials/<uuid:pk>",
        AccessCredentialDetailView.as_view(),
        name="access-credential-detail",
    ),
    path(
        f"{_BASE}/access-credentials/<uuid:pk>/deliver",
        AccessCredentialDeliverView.as_view(),
        name="access-credential-deliver",
    ),
    path(f"{_BASE}/secrets", ProjectSecretListView.as_view(), name="project-secret-list"),
    path(f"{_BASE}/secrets/<uuid:pk>", ProjectSecretDetailView.as_view(), name="project-secret-detail"),
]
