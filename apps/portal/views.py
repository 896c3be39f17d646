from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from apps.tenancy import principal as principals


@login_required
def dashboard(request):
    return render(request, "portal/dashboard.html", {"principal": principals.for_user(request.user)})
