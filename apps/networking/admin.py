"""Operator surfaces for the VRF pool: VRFs with their VLANs (read-only: onboarding
and CCP's VPC calls assign them), and a form that loads more VRFs into the pool
through ``services.load_pool`` (policy and audit there)."""

from __future__ import annotations

import re

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.core.validators import RegexValidator
from django.db import IntegrityError
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from apps.core.admin import IsNullFilter, ReadOnlyInline, ReadOnlyModelAdmin
from apps.core.errors import ApiError
from apps.networking import services
from apps.networking.models import Vlan, Vrf
from apps.tenancy import principal as principals

VLANS_PER_VRF = len(Vlan.Purpose.choices)
MAX_VNI = 16_777_215  # 24-bit VXLAN network identifier
MAX_VLAN = 4094


class VlanInline(ReadOnlyInline):
    model = Vlan
    fields = ("purpose", "vlan_id")
    readonly_fields = fields


class AssignedFilter(IsNullFilter):
    title = "assignment"
    parameter_name = "assigned"
    field = "tenant"
    when_null = ("free", "Free (in the pool)")
    when_set = ("assigned", "Assigned to a tenant")


class LoadPoolForm(forms.Form):
    prefix = forms.CharField(
        max_length=50,
        initial="vrf",
        validators=[RegexValidator(r"^[a-z0-9][a-z0-9-]*$", "Lowercase letters, digits and dashes.")],
        help_text="VRFs are named prefix-0001, prefix-0002, ... up to the count; existing names are skipped.",
    )
    count = forms.IntegerField(
        min_value=1,
        max_value=1000,
        help_text="Position n (from 1) gets VNI first VNI + n - 1 and four VLANs from first VLAN + 4(n - 1).",
    )
    first_vni = forms.IntegerField(label="First VNI", min_value=1, max_value=MAX_VNI)
    first_vlan = forms.IntegerField(label="First VLAN", min_value=2, max_value=MAX_VLAN)

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        prefix, count = data["prefix"], data["count"]
        first_vni, first_vlan = data["first_vni"], data["first_vlan"]
        if first_vni + count - 1 > MAX_VNI:
            raise forms.ValidationError(f"The last VNI would be above {MAX_VNI}.")
        if first_vlan + count * VLANS_PER_VRF - 1 > MAX_VLAN:
            raise forms.ValidationError(
                f"{count} VRFs need {count * VLANS_PER_VRF} VLANs: the last would be above {MAX_VLAN}."
            )
        # The VRFs this would create (existing names are skipped) against the VNIs and VLANs in use.
        names = {f"{prefix}-{n + 1:04d}": n for n in range(count)}
        existing = set(Vrf.objects.filter(name__in=names).values_list("name", flat=True))
        new = [n for name, n in names.items() if name not in existing]
        if not new:
            raise forms.ValidationError("Every VRF of this range is already in the pool: nothing to add.")
        vnis = [first_vni + n for n in new]
        vlans = [first_vlan + n * VLANS_PER_VRF + offset for n in new for offset in range(VLANS_PER_VRF)]
        taken_vnis = sorted(Vrf.objects.filter(vni__in=vnis).values_list("vni", flat=True))
        taken_vlans = sorted(Vlan.objects.filter(vlan_id__in=vlans).values_list("vlan_id", flat=True))
        if taken_vnis:
            raise forms.ValidationError(f"VNI(s) already in use: {_some(taken_vnis)}.")
        if taken_vlans:
            raise forms.ValidationError(f"VLAN(s) already in use: {_some(taken_vlans)}.")
        data["new_count"] = len(new)
        return data


def _some(values: list, limit: int = 10) -> str:
    shown = ", ".join(str(v) for v in values[:limit])
    return shown + (f" and {len(values) - limit} more" if len(values) > limit else "")


@admin.register(Vrf)
class VrfAdmin(ReadOnlyModelAdmin):
    list_display = ("name", "vni", "tenant", "vpc_id", "assigned_at")
    list_filter = (AssignedFilter, "tenant")
    search_fields = ("name", "=vni", "vpc_id", "tenant__tenant_id", "tenant__name")
    list_select_related = ("tenant",)
    list_per_page = 100
    fields = ("id", "name", "vni", "tenant", "vpc_id", "assigned_at", "created_at", "updated_at")
    readonly_fields = fields
    inlines = (VlanInline,)
    change_list_template = "admin/networking/vrf/change_list.html"

    def get_urls(self):
        urls = [path("load/", self.admin_site.admin_view(self.load_pool_view), name="networking_vrf_load")]
        return urls + super().get_urls()

    def has_load_permission(self, request):
        # Whoever sees the pool may ask; the service refuses anyone without the network role (and audits it).
        return self.has_view_permission(request)

    def changelist_view(self, request, extra_context=None):
        extra_context = {
            **(extra_context or {}),
            "free_vrfs": services.free_vrf_count(),
            "can_load": self.has_load_permission(request),
        }
        return super().changelist_view(request, extra_context)

    def load_pool_view(self, request):
        """Load VRFs into the pool; the service checks the operator's role and audits."""
        if not self.has_load_permission(request):
            raise PermissionDenied
        form = LoadPoolForm(request.POST or None, initial=self._next_range())
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            try:
                created = services.load_pool(
                    prefix=data["prefix"],
                    count=data["count"],
                    first_vni=data["first_vni"],
                    first_vlan=data["first_vlan"],
                    principal=principals.for_user(request.user),
                )
            except ApiError as exc:
                self.message_user(request, f"VRFs not loaded: {exc.message}", messages.ERROR)
            except IntegrityError:  # a concurrent load took a VNI or VLAN between the check and the insert
                form.add_error(None, "A VNI or VLAN of this range was taken meanwhile; check it again.")
            else:
                self.message_user(
                    request,
                    f"Loaded {created} VRF(s) into the pool; {services.free_vrf_count()} free.",
                    messages.SUCCESS,
                )
                return HttpResponseRedirect(reverse("admin:networking_vrf_changelist"))
        context = {
            **self.admin_site.each_context(request),
            "title": "Load VRFs into the pool",
            "opts": self.model._meta,
            "form": form,
            "free_vrfs": services.free_vrf_count(),
            "total_vrfs": Vrf.objects.count(),
            "media": self.media + form.media,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/networking/vrf/load_pool.html", context)

    @staticmethod
    def _next_range() -> dict:
        """A suggestion: the range of the most recent prefix, eight VRFs longer.

        Names and numbers are by position, so extending a range repeats its first
        VNI and VLAN with a larger count (the existing names are skipped).
        """
        default = {"prefix": "vrf", "count": 32, "first_vni": 50001, "first_vlan": 1000}
        last = Vrf.objects.order_by("-created_at", "-vni").first()
        if last is None or "-" not in last.name:
            return default
        prefix = last.name.rsplit("-", 1)[0]
        first = Vrf.objects.filter(name=f"{prefix}-0001").first()
        first_vlan = first and first.vlans.order_by("vlan_id").values_list("vlan_id", flat=True).first()
        if not first_vlan:
            return default
        in_range = Vrf.objects.filter(name__regex=rf"^{re.escape(prefix)}-[0-9]{{4}}$").count()
        return {"prefix": prefix, "count": in_range + 8, "first_vni": first.vni, "first_vlan": first_vlan}
