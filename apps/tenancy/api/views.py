from __future__ import annotations

from django.db.models import Prefetch
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.permissions import AllowAny
from rest_framework.response import Response

from apps.core.errors import NotFound, ValidationFailed
from apps.core.idempotency import idempotent
from apps.core.models import AuditEvent
from apps.tenancy import policy, selectors, services
from apps.tenancy.api import serializers as s
from apps.tenancy.api.base import BaseAPIView, BaseListAPIView, FilteredListAPIView, validated
from apps.tenancy.filters import AuditEventFilter
from apps.tenancy.models import Membership, Project, ServiceAccount, Tenant
from apps.tenancy.roles import Perm


def _tenants(principal):
    # A tenant is visible to members of any of its projects; its project list
    # shows only the projects the caller may see.
    visible = policy.restrict(Project.objects.all(), principal, Perm.PROJECT_VIEW)
    return Tenant.objects.select_related("storage").prefetch_related(
        Prefetch("projects", queryset=visible), "quotas", "vrfs__vlans"
    )


# --- CCP onboarding (/api/tenants) -------------------------------------------


class CcpTenantListView(BaseAPIView):
    allow_unknown_tenant = True  # the token's domain_id names the tenant being onboarded

    @extend_schema(
        request=s.OnboardTenantSerializer,
        responses={201: s.TenantSerializer, 200: s.TenantSerializer},
        summary="Onboard a tenant (CCP)",
    )
    @idempotent
    def post(self, request):
        # Refused before validation: the body's errors are no business of other callers.
        policy.require_scope(self.principal, Perm.TENANT_ONBOARD)
        data = validated(s.OnboardTenantSerializer, request.data)
        result = services.onboard_tenant(self.principal, **data)
        tenant = _tenants(self.principal).get(pk=result.obj.pk)
        return Response(s.TenantSerializer(tenant).data, status=201 if result.created else 200)


class CcpTenantDetailView(BaseAPIView):
    @extend_schema(responses=s.TenantSerializer, summary="A tenant by CCP tenant id")
    def get(self, request, tenant_id):
        tenant = policy.get_object(
            _tenants(self.principal), self.principal, Perm.TENANT_VIEW, tenant_id=tenant_id
        )
        return Response(s.TenantSerializer(tenant).data)


class CcpTenantProjectsView(BaseAPIView):
    @extend_schema(
        request=s.OnboardProjectSerializer,
        responses={201: s.ProjectSerializer, 200: s.ProjectSerializer},
        summary="Add a project (CCP cell) to a tenant",
    )
    @idempotent
    def post(self, request, tenant_id):
        tenant = selectors.tenant_for(self.principal, tenant_id, Perm.PROJECT_CREATE)
        data = validated(s.OnboardProjectSerializer, request.data)
        result = services.create_project(self.principal, tenant, **data)
        return Response(s.ProjectSerializer(result.obj).data, status=201 if result.created else 200)


# --- platform API (/api/v1) --------------------------------------------------


class TenantDetailView(BaseAPIView):
    @extend_schema(responses=s.TenantSerializer, summary="A tenant by platform UUID")
    def get(self, request, pk):
        tenant = policy.get_object(_tenants(self.principal), self.principal, Perm.TENANT_VIEW, pk=pk)
        return Response(s.TenantSerializer(tenant).data)


class ProjectListView(BaseListAPIView):
    serializer_class = s.ProjectSerializer

    def get_queryset(self):
        return policy.restrict(Project.objects.select_related("tenant"), self.principal, Perm.PROJECT_VIEW)

    @extend_schema(
        request=s.ProjectCreateSerializer,
        responses={201: s.ProjectSerializer, 200: s.ProjectSerializer},
        summary="Create a project in a tenant",
    )
    @idempotent
    def post(self, request):
        data = validated(s.ProjectCreateSerializer, request.data)
        tenant = self._tenant(data.get("tenant"))
        result = services.create_project(
            self.principal,
            tenant,
            project_id=data["project_id"],
            name=data["name"],
        )
        return Response(s.ProjectSerializer(result.obj).data, status=201 if result.created else 200)

    def _tenant(self, tenant_pk) -> Tenant:
        if tenant_pk is not None:
            return policy.get_object(Tenant.objects.all(), self.principal, Perm.TENANT_VIEW, pk=tenant_pk)
        tenant_ids = self.principal.tenant_ids()
        if len(tenant_ids) != 1:
            raise ValidationFailed(details={"tenant": ["Name the tenant: you belong to several or none."]})
        return Tenant.objects.get(pk=next(iter(tenant_ids)))


class ProjectDetailView(BaseAPIView):
    @extend_schema(responses=s.ProjectSerializer, summary="A project")
    def get(self, request, pk):
        project = policy.get_object(
            Project.objects.select_related("tenant"), self.principal, Perm.PROJECT_VIEW, pk=pk
        )
        return Response(s.ProjectSerializer(project).data)


class ProjectScopedMixin:
    """Resolves ``project_pk`` from the URL once, 404 outside the caller's scope."""

    def project(self, action_perm: str | None = None) -> Project:
        if not hasattr(self, "_project"):
            self._project = policy.get_object(
                Project.objects.select_related("tenant"),
                self.principal,
                Perm.PROJECT_VIEW,
                pk=self.kwargs["project_pk"],
            )
        if action_perm:
            policy.require(self.principal, action_perm, self._project)
        return self._project


class MemberListView(ProjectScopedMixin, BaseListAPIView):
    serializer_class = s.MembershipSerializer

    def get_queryset(self):
        project = self.project(Perm.MEMBER_VIEW)
        return Membership.objects.filter(project=project).select_related("user")

    @extend_schema(
        request=s.MembershipCreateSerializer,
        responses={201: s.MembershipSerializer},
        summary="Add a member to the project",
    )
    @idempotent
    def post(self, request, project_pk):
        project = self.project(Perm.MEMBER_MANAGE)
        data = validated(s.MembershipCreateSerializer, request.data)
        membership = services.add_member(self.principal, project, **data)
        return Response(s.MembershipSerializer(membership).data, status=status.HTTP_201_CREATED)


class MemberDetailView(ProjectScopedMixin, BaseAPIView):
    @extend_schema(responses={204: None}, summary="Remove a member from the project")
    def delete(self, request, project_pk, pk):
        project = self.project(Perm.MEMBER_MANAGE)
        membership = Membership.objects.filter(project=project, pk=pk).select_related("user").first()
        if membership is None:
            raise NotFound()
        services.remove_member(self.principal, membership)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ServiceAccountListView(ProjectScopedMixin, BaseListAPIView):
    serializer_class = s.ServiceAccountSerializer

    def get_queryset(self):
        project = self.project(Perm.SERVICE_ACCOUNT_VIEW)
        return ServiceAccount.objects.filter(project=project)

    @extend_schema(
        request=s.ServiceAccountCreateSerializer,
        responses={201: s.ServiceAccountCreatedSerializer},
        summary="Create a project service account (the secret is returned once)",
    )
    @idempotent
    def post(self, request, project_pk):
        project = self.project(Perm.SERVICE_ACCOUNT_MANAGE)
        data = validated(s.ServiceAccountCreateSerializer, request.data)
        issued = services.create_service_account(self.principal, project, **data)
        body = s.ServiceAccountSerializer(issued.account).data
        body["client_secret"] = issued.client_secret
        return Response(body, status=status.HTTP_201_CREATED)


class ServiceAccountDetailView(ProjectScopedMixin, BaseAPIView):
    @extend_schema(responses=s.ServiceAccountSerializer, summary="A service account")
    def get(self, request, project_pk, pk):
        project = self.project(Perm.SERVICE_ACCOUNT_VIEW)
        return Response(s.ServiceAccountSerializer(self._account(project, pk)).data)

    @extend_schema(
        responses={204: None}, summary="Revoke a service account (its tokens stop working at once)"
    )
    def delete(self, request, project_pk, pk):
        project = self.project(Perm.SERVICE_ACCOUNT_MANAGE)
        services.revoke_service_account(self.principal, self._account(project, pk))
        return Response(status=status.HTTP_204_NO_CONTENT)

    @staticmethod
    def _account(project, pk) -> ServiceAccount:
        account = ServiceAccount.objects.filter(project=project, pk=pk).first()
        if account is None:
            raise NotFound()
        return account


class TokenView(BaseAPIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(
        request={"application/x-www-form-urlencoded": s.TokenRequestSerializer},
        responses=s.TokenSerializer,
        summary="Service-account token (client credentials)",
    )
    def post(self, request):
        data = validated(s.TokenRequestSerializer, request.data)
        token, lifetime = services.issue_token(data["client_id"], data["client_secret"])
        return Response(
            {"access_token": token, "token_type": "Bearer", "expires_in": lifetime},
            headers={"Cache-Control": "no-store", "Pragma": "no-cache"},
        )


class JwksView(BaseAPIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]
    throttle_classes: list = []

    @extend_schema(responses={200: dict}, summary="The platform's token verification keys")
    def get(self, request):
        from apps.tenancy.auth import platform_tokens

        return Response(platform_tokens.jwks(), headers={"Cache-Control": "public, max-age=300"})


@extend_schema_view(get=extend_schema(summary="The audit trail of the caller's tenants"))
class AuditListView(FilteredListAPIView):
    serializer_class = s.AuditEventSerializer
    filterset_class = AuditEventFilter
    queryset = AuditEvent.objects.none()  # the model, for the schema; get_queryset scopes it

    def get_queryset(self):
        return services.list_audit_events(self.principal)
