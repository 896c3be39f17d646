"""The project's Secrets and Access credentials tabs: names, public keys and dates
only. A secret's value is typed once and never shown; a credential's private key is
shown once, on the answer to its creation (never cached, never kept by htmx)."""

from __future__ import annotations

from django.contrib import messages
from django.urls import reverse
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_http_methods, require_POST

from apps.access import services
from apps.access.models import AccessCredential, ProjectSecret
from apps.portal.forms import AccessCredentialForm, ProjectSecretForm
from apps.portal.htmx import htmx_partial, hx_redirect, render_fragment
from apps.portal.views.base import in_project, portal_view, refusal_on, scoped_project
from apps.portal.views.project_detail import CREDENTIALS, SECRETS, render_tab
from apps.tenancy.roles import Perm

_TEMPLATES = {
    SECRETS: "portal/partials/project_secrets.html",
    CREDENTIALS: "portal/partials/access_credentials.html",
}


def _answer(request, principal, project, tab, context, *, status=200):
    if htmx_partial(request) and request.method == "POST":
        return render_fragment(request, _TEMPLATES[tab], {"project": project, **context}, status=status)
    return render_tab(request, principal, project, tab, context, status=status)


@require_http_methods(["GET", "HEAD", "POST"])
@portal_view
def project_secrets(request, principal, pk):
    project = scoped_project(principal, pk, Perm.SECRET_MANAGE)
    form = ProjectSecretForm(request.POST) if request.method == "POST" else ProjectSecretForm()
    status = 200
    if request.method == "POST":
        status = 400
        if form.is_valid():
            with refusal_on(form) as refused:
                secret, created = services.put_secret(principal, project, **form.cleaned_data)
            if not refused:
                messages.success(request, f"Secret {secret.name} {'added' if created else 'replaced'}.")
                if not htmx_partial(request):
                    return hx_redirect(request, reverse("project_secrets", args=[project.pk]))
                form, status = ProjectSecretForm(), 200
    context = {"secrets": ProjectSecret.objects.filter(project=project), "secret_form": form}
    return _answer(request, principal, project, SECRETS, context, status=status)


@require_POST
@portal_view
def project_secret_remove(request, principal, pk, secret_pk):
    project = scoped_project(principal, pk, Perm.SECRET_MANAGE)
    secret = in_project(ProjectSecret.objects.all(), project, secret_pk, "secret")
    services.delete_secret(principal, secret)
    messages.success(request, f"Secret {secret.name} removed.")
    return hx_redirect(request, reverse("project_secrets", args=[project.pk]))


@require_http_methods(["GET", "HEAD", "POST"])
@portal_view
def access_credentials(request, principal, pk):
    project = scoped_project(principal, pk, Perm.ACCESS_CREDENTIAL_MANAGE)
    form = AccessCredentialForm(request.POST) if request.method == "POST" else AccessCredentialForm()
    issued, status = None, 200
    if request.method == "POST":
        status = 400
        if form.is_valid():
            with refusal_on(form) as refused:
                issued = services.create_credential(principal, project, name=form.cleaned_data["name"])
            if not refused:
                form, status = AccessCredentialForm(), 201
    context = {
        "credentials": AccessCredential.objects.filter(project=project),
        "credential_form": form,
        "issued": issued,
    }
    response = _answer(request, principal, project, CREDENTIALS, context, status=status)
    if issued:
        add_never_cache_headers(response)  # the private key is on this answer alone
    return response


@require_POST
@portal_view
def access_credential_remove(request, principal, pk, credential_pk):
    project = scoped_project(principal, pk, Perm.ACCESS_CREDENTIAL_MANAGE)
    credential = in_project(AccessCredential.objects.all(), project, credential_pk, "access credential")
    services.delete_credential(principal, credential)
    messages.success(request, f"Access credential {credential.name} deleted with its private key.")
    return hx_redirect(request, reverse("access_credentials", args=[project.pk]))
