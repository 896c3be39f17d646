"""Portal forms: shape and field checks only. The services decide everything
else, and their refusals land on the form through ``ServiceForm.add_service_error``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, time, timedelta
from typing import ClassVar

from django import forms
from django.conf import settings
from django.template.defaultfilters import pluralize
from django.utils import timezone

from apps.allocations.services import MAX_COUNT
from apps.catalog.manifests import SECRET_NAME
from apps.core.errors import ApiError, InvalidState, ValidationFailed
from apps.core.models import AuditEvent
from apps.tenancy.models import Tenant, ccp_identifier
from apps.tenancy.roles import PROJECT_ROLES, Limit, Role

PROJECT_ROLE_CHOICES = [(role.value, role.label) for role in Role if role in PROJECT_ROLES]


class ServiceForm(forms.Form):
    """A form whose values a service judges. ``add_service_error`` puts the service's
    refusal on the field it names, else above the form."""

    # The service's name for a value, where this form's field has another.
    service_fields: ClassVar[dict[str, str]] = {}
    # The field a refusal of the current state (409 ``invalid_state``) is about, if any.
    state_field: str | None = None

    def add_service_error(self, exc: ApiError) -> None:
        placed = False
        # Only a validation error's details name values (CONTRACT.md); the others' are
        # data, like a quota's numbers or the flavor that had no free node.
        if isinstance(exc, ValidationFailed):
            for field, messages in self.detail_errors(exc.details):
                self.add_error(field, messages)
                placed = True
        if not placed and self.state_field and isinstance(exc, InvalidState):
            self.add_error(self.state_field, exc.message)
            placed = True
        if not placed:
            retry = f" Try again in {exc.retry_after} s." if exc.retry_after else ""
            self.add_error(None, exc.message + retry)

    def detail_errors(self, details: dict) -> Iterator[tuple[str | None, list[str]]]:
        """``(field, messages)`` for each value a validation error names; None: above the form."""
        for key, messages in details.items():
            field = self.service_fields.get(key, key)
            yield (field if field in self.fields else None), _messages(messages)


def _messages(value) -> list[str]:
    return [str(m) for m in value] if isinstance(value, (list, tuple)) else [str(value)]


class ProjectForm(ServiceForm):
    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none(), empty_label=None)
    project_id = forms.CharField(
        label="Project id",
        max_length=64,
        validators=[ccp_identifier],
        help_text="The CCP cell id: letters, digits, '.', '_' or '-'. It cannot change later.",
    )
    name = forms.CharField(max_length=200)

    def __init__(self, *args, tenants=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["tenant"].queryset = tenants if tenants is not None else Tenant.objects.none()


class MemberForm(ServiceForm):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=PROJECT_ROLE_CHOICES, initial=Role.VIEWER)
    limit = forms.ChoiceField(choices=Limit.choices, required=False, initial=Limit.NONE)


class ServiceAccountForm(ServiceForm):
    name = forms.CharField(max_length=100, help_text="What will use it, e.g. 'ci-pipeline'.")
    role = forms.ChoiceField(choices=PROJECT_ROLE_CHOICES, initial=Role.VIEWER)
    limit = forms.ChoiceField(choices=Limit.choices, required=False, initial=Limit.NONE)


class ProjectSecretForm(ServiceForm):
    name = forms.RegexField(
        SECRET_NAME, max_length=64, help_text="How apps name it at launch, e.g. 'hf-token'."
    )
    # Never rendered back: a refused form asks for the value again.
    value = forms.CharField(widget=forms.PasswordInput(render_value=False), strip=False, max_length=64 * 1024)


class AccessCredentialForm(ServiceForm):
    name = forms.RegexField(SECRET_NAME, max_length=64, help_text="What it is for, e.g. 'controller'.")


class AuditFilterForm(ServiceForm):
    action = forms.CharField(required=False, max_length=100)
    outcome = forms.ChoiceField(required=False, choices=[("", "Any outcome"), *AuditEvent.Outcome.choices])
    actor = forms.CharField(required=False, max_length=255)
    project = forms.ChoiceField(required=False, choices=[])
    date_from = forms.DateField(required=False, label="From", widget=forms.DateInput(attrs={"type": "date"}))
    date_to = forms.DateField(required=False, label="To", widget=forms.DateInput(attrs={"type": "date"}))

    def __init__(self, *args, projects=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["project"].choices = [("", "Any project")] + [
            (str(p.pk), f"{p.tenant.name} / {p.name}") for p in projects
        ]

    def clean(self):
        data = super().clean()
        start, end = data.get("date_from"), data.get("date_to")
        if start and end and start > end:
            self.add_error("date_to", "Must be on or after the start date.")
        return data

    def service_filters(self) -> dict[str, str]:
        """The filters of ``AuditEventFilter`` (the API's): dates become whole days, ``to`` inclusive."""
        data = self.cleaned_data
        filters = {key: data[key] for key in ("action", "outcome", "actor", "project") if data.get(key)}
        if data.get("date_from"):
            filters["from"] = _midnight(data["date_from"]).isoformat()
        if data.get("date_to"):
            filters["to"] = _midnight(data["date_to"] + timedelta(days=1)).isoformat()
        return filters


def _midnight(day) -> datetime:
    return datetime.combine(day, time.min, tzinfo=timezone.get_current_timezone())


class AllocationForm(ServiceForm):
    """Allocate nodes. ``flavors`` carry ``free`` (schedulable nodes now) and ``price``
    (of a node-hour now) for their cards."""

    # Shown as cards (allocation_form.html), each with its price and free nodes.
    flavor = forms.ChoiceField(choices=[], widget=forms.RadioSelect)
    os_image = forms.ChoiceField(label="OS image", choices=[])
    count = forms.IntegerField(
        label="Nodes",
        min_value=1,
        max_value=MAX_COUNT,
        initial=1,
        help_text=f"All or nothing: 1 to {MAX_COUNT} nodes of the flavor.",
    )

    def __init__(self, *args, flavors=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.flavors = {f.name: f for f in flavors}
        self.fields["flavor"].choices = [(f.name, f.name) for f in flavors]
        self.fields["os_image"].choices = [(image, image) for image in settings.OS_IMAGES]
        self.fields["count"].widget.attrs.update({"inputmode": "numeric"})


class ReleaseForm(forms.Form):
    drain = forms.BooleanField(
        required=False,
        initial=True,
        label="Drain workloads first",
        help_text="Stop the node's workloads through its agent before the node is taken back.",
    )
    erase_disk = forms.BooleanField(
        required=False,
        label="Erase disks",
        help_text="Wipe local disks when the node returns to the pool (slower).",
    )
    hostname = forms.CharField(
        required=False,
        max_length=255,
        label="Type the node's hostname to confirm",
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )

    def __init__(self, *args, confirm_hostname: str = "", **kwargs):
        """``confirm_hostname``: apps run on the node, so the user types its name (a
        slip of the mouse must not delete them); empty: no typing asked."""
        super().__init__(*args, **kwargs)
        self.confirm_hostname = confirm_hostname
        if confirm_hostname:
            self.fields["hostname"].widget.attrs["aria-describedby"] = "release-typing-why"
        else:
            del self.fields["hostname"]

    def clean_hostname(self) -> str:
        typed = self.cleaned_data["hostname"].strip()
        if typed != self.confirm_hostname:
            raise forms.ValidationError(
                f"Type {self.confirm_hostname} to release it with the apps that run on it."
            )
        return typed

    def release_options(self) -> dict:
        return {"drain": self.cleaned_data["drain"], "erase_disk": self.cleaned_data["erase_disk"]}

    def option_fields(self) -> list:
        return [self["drain"], self["erase_disk"]]


# --- launching an app: fields built from the manifest ---------------------------

PARAM_PREFIX = "param_"
# Inside a character class the ``v`` flag (which browsers use for ``pattern``) wants
# these escaped; escaping them is also valid under the ``u`` flag.
_CLASS_ESCAPE = set("()[]{}/-\\|&!#%,:;<=>@`~^$.*+?")
_QUANTIFIER = re.compile(r"\{\d+(,\d*)?\}")


def html_pattern(pattern: str) -> str | None:
    """The manifest's (Python) pattern as an HTML ``pattern`` attribute, or None
    when it uses syntax the browser may read differently (named groups, inline
    flags, ``\\A``...): an invalid attribute is a console error and no check at
    all, and the service checks the value anyway."""
    out, i, n = [], 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char == "\\":
            if i + 1 >= n or not (pattern[i + 1] in "dDwWsS" or pattern[i + 1] in _CLASS_ESCAPE):
                return None
            out.append(pattern[i : i + 2])
            i += 2
        elif char == "[":
            end, body = _html_class(pattern, i + 1)
            if end is None:
                return None
            out.append(body)
            i = end
        elif char == "(":
            if pattern.startswith("(?", i) and not pattern.startswith("(?:", i):
                return None
            out.append(char)
            i += 1
        elif char == "{":
            quantifier = _QUANTIFIER.match(pattern, i)
            if quantifier is None:
                return None
            out.append(quantifier.group(0))
            i = quantifier.end()
        elif char in "]}":
            out.append("\\" + char)
            i += 1
        else:
            out.append(char)
            i += 1
    return "".join(out)


def _html_class(pattern: str, i: int) -> tuple[int | None, str]:
    """``[...]`` from ``pattern[i:]`` (just after the ``[``), every literal escaped."""
    out = ["["]
    if pattern.startswith("^", i):
        out.append("^")
        i += 1
    if pattern.startswith("]", i):
        return None, ""  # a literal ']' first: Python's reading, not the browser's
    previous_atom = range_end = False
    while i < len(pattern):
        char = pattern[i]
        if char == "]":
            out.append("]")
            return i + 1, "".join(out)
        if char == "\\":
            if i + 1 >= len(pattern):
                return None, ""
            following = pattern[i + 1]
            if following in "dDwWsS":
                out.append(pattern[i : i + 2])
            elif following in _CLASS_ESCAPE:
                out.append("\\" + following)
            else:
                return None, ""
            previous_atom, range_end = following not in "dDwWsS" and not range_end, False
            i += 2
            continue
        if char == "-" and previous_atom and i + 1 < len(pattern) and pattern[i + 1] != "]":
            out.append("-")  # a range, as in a-z
            previous_atom, range_end = False, True
            i += 1
            continue
        out.append("\\" + char if char in _CLASS_ESCAPE else char)
        previous_atom, range_end = not range_end, False  # after a-z, a '-' is a literal
        i += 1
    return None, ""


def _bounds_hint(param: dict) -> str:
    low, high = param.get("minimum"), param.get("maximum")
    if low is not None and high is not None:
        return f"From {low} to {high}."
    if low is not None:
        return f"At least {low}."
    if high is not None:
        return f"At most {high}."
    return ""


def parameter_field(param: dict, secret_names=()) -> forms.Field:
    """A form field for one manifest parameter. Its constraints become HTML
    attributes (the browser's hints); the values are judged by
    ``services.launch`` (``manifests.clean_parameters``), whose messages land on
    the field, so the rules live in one place."""
    kind = param["type"]
    label = param.get("label") or param["name"].replace("_", " ").capitalize()
    help_text = param.get("help", "")
    has_default = "default" in param
    default = param.get("default")
    attrs: dict = {}
    if param.get("required") and not has_default and kind != "boolean":
        attrs["required"] = True
    if kind == "boolean":
        return forms.BooleanField(label=label, help_text=help_text, required=False, initial=bool(default))
    if kind == "secret":
        # The project's secrets by name; their values never reach a page.
        return forms.ChoiceField(
            label=label,
            help_text=help_text or "One of the project's secrets (the project's Secrets tab).",
            required=False,
            choices=[("", "\u2014"), *((name, name) for name in secret_names)],
            widget=forms.Select(attrs=attrs),
        )
    if kind == "choice":
        choices = [(str(choice), str(choice)) for choice in param["choices"]]
        if not has_default:
            choices.insert(0, ("", "\u2014"))
        return forms.ChoiceField(
            label=label,
            help_text=help_text,
            required=False,
            choices=choices,
            initial=str(default) if has_default else "",
            widget=forms.Select(attrs=attrs),
        )
    if kind in ("integer", "number"):
        attrs["step"] = "1" if kind == "integer" else "any"
        for key, attr in (("minimum", "min"), ("maximum", "max")):
            if key in param:
                attrs[attr] = param[key]
        field_class = forms.IntegerField if kind == "integer" else forms.FloatField
        return field_class(
            label=label,
            help_text=" ".join(part for part in (help_text, _bounds_hint(param)) if part),
            required=False,
            initial=default,
            widget=forms.NumberInput(attrs=attrs),
        )
    attrs["maxlength"] = param.get("max_length", 500)
    if "pattern" in param:
        pattern = html_pattern(param["pattern"])
        if pattern is not None:
            attrs["pattern"] = pattern
        attrs["title"] = f"Must match {param['pattern']}"
    attrs["spellcheck"] = "false"
    return forms.CharField(
        label=label, help_text=help_text, required=False, initial=default, widget=forms.TextInput(attrs=attrs)
    )


class _DisablesChoices:
    """A choice widget whose options named in ``disabled`` show but cannot be picked."""

    disabled: frozenset[str] = frozenset()

    def create_option(self, name, value, *args, **kwargs):
        option = super().create_option(name, value, *args, **kwargs)
        if str(value) in self.disabled:
            option["attrs"]["disabled"] = True
        return option


class PlacementSelect(_DisablesChoices, forms.Select):
    pass


class PlacementCheckboxes(_DisablesChoices, forms.CheckboxSelectMultiple):
    pass


class LaunchForm(ServiceForm):
    """Launch an app: where (an ACTIVE allocation), which version, a name, and the
    parameters of that version's manifest (fields ``param_<name>``).

    ``allocations`` carry ``free_gpus`` and ``full`` (too few free for the app: shown,
    marked, not offered); ``versions`` are the published ones."""

    service_fields: ClassVar[dict[str, str]] = {"allocation_id": "allocation", "allocation_ids": "allocation"}
    state_field = "allocation"  # launch's only state check is the allocation's

    allocation = forms.UUIDField(label="Run on", widget=PlacementSelect)
    version = forms.CharField(max_length=32, widget=forms.Select)
    name = forms.CharField(
        label="Instance name",
        max_length=100,
        required=False,
        help_text="Optional. Without one the instance is named after the app and the time.",
    )

    def __init__(self, *args, manifest: dict, versions=(), allocations=(), secret_names=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.manifest = manifest
        choices = [
            (
                str(a.pk),
                f"{a.node.hostname} \u00b7 {a.flavor.name} \u00b7 "
                f"{a.free_gpus} of {a.flavor.gpus_per_node} GPU{pluralize(a.flavor.gpus_per_node)} free"
                + ("" if a.node.credential_hash else " \u00b7 no node agent yet")
                + (" \u00b7 full" if a.full else ""),
            )
            for a in allocations
        ]
        full = frozenset(str(a.pk) for a in allocations if a.full)
        cluster = manifest.get("cluster")
        if cluster:
            # A clustered app: one member per chosen allocation, the first one the primary.
            self.fields["allocation"] = forms.MultipleChoiceField(
                label="Run on",
                choices=choices,
                widget=PlacementCheckboxes,
                help_text=f"Pick {cluster['min_members']} to {cluster['max_members']} nodes, one member "
                "each; the first one listed is the primary.",
            )
        else:
            self.fields["allocation"].widget.choices = choices
        self.fields["allocation"].widget.disabled = full
        self.fields["version"].widget.choices = [(v.version, v.version) for v in versions]
        self.fields["name"].widget.attrs.update({"placeholder": "e.g. my-notebook", "autocomplete": "off"})
        self.parameter_names = [param["name"] for param in manifest.get("parameters", [])]
        for param in manifest.get("parameters", []):
            self.fields[PARAM_PREFIX + param["name"]] = parameter_field(param, secret_names)

    def parameter_fields(self) -> list:
        return [self[PARAM_PREFIX + name] for name in self.parameter_names]

    def parameters(self) -> dict:
        """The launch values, typed as the manifest declares them; an empty field is
        left out, so that the service applies the default (or says it is required)."""
        declared = {p["name"]: p for p in self.manifest.get("parameters", [])}
        values = {}
        for name, param in declared.items():
            value = self.cleaned_data.get(PARAM_PREFIX + name)
            if value is None or value == "":
                continue
            if param["type"] == "choice":
                value = next((c for c in param["choices"] if str(c) == value), value)
            values[name] = value
        return values

    def detail_errors(self, details: dict) -> Iterator[tuple[str | None, list[str]]]:
        """The parameters' messages on their fields (``parameters`` maps name to messages)."""
        for key, messages in details.items():
            if key == "parameters" and isinstance(messages, dict):
                for name, said in messages.items():
                    field = PARAM_PREFIX + name
                    if field in self.fields:
                        yield field, _messages(said)
                    else:
                        yield None, [f"{name}: {message}" for message in _messages(said)]
            else:
                yield from super().detail_errors({key: messages})


class ShareForm(ServiceForm):
    with_project = forms.BooleanField(
        required=False,
        label="Shared with the project",
        help_text="Everyone in the project can see it (only its owner and admins can manage it).",
    )
    usernames = forms.CharField(
        required=False,
        max_length=1000,
        label="Share with people",
        help_text="Usernames of this tenant, separated by commas or spaces. They can see the instance.",
    )

    def clean_usernames(self) -> list[str]:
        names = re.split(r"[\s,]+", self.cleaned_data.get("usernames") or "")
        return list(dict.fromkeys(name for name in names if name))


class RevokeShareForm(forms.Form):
    """The one user the sharing list's button stops sharing with."""

    revoke = forms.CharField(max_length=150)  # a username; CharField also refuses a NUL byte


def _public_key_field(help_text: str) -> forms.CharField:
    """An OpenSSH public key, pasted (the service checks it)."""
    return forms.CharField(
        max_length=16_384,
        label="Public key",
        widget=forms.Textarea(
            attrs={"rows": 3, "class": "mono", "placeholder": "ssh-ed25519 AAAA... you@laptop"}
        ),
        help_text=help_text,
    )


class SshKeyForm(ServiceForm):
    """A public key for an allocation's runtime user (the service checks it)."""

    public_key = _public_key_field(
        "One OpenSSH public key line (~/.ssh/id_ed25519.pub). Never paste a private key."
    )
    purpose = forms.ChoiceField(
        choices=[("user", "User login"), ("bootstrap", "Bootstrap (automation)")], initial="user"
    )


class ProfileKeyForm(ServiceForm):
    name = forms.CharField(
        max_length=100, required=False, help_text="e.g. 'work laptop' (default: the key's comment)"
    )
    public_key = _public_key_field(
        "Put on every new allocation of the projects where you manage allocations."
    )
