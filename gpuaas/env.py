"""Typed access to the process environment.

Every variable may also be given as ``NAME_FILE`` (a path whose content is the
value), so secrets can come from mounted files. A bad value stops start-up with
an ``ImproperlyConfigured`` that names the variable.
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import environ
from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}

T = TypeVar("T")


def raw(name: str, default: str | None = None) -> str | None:
    file_path = os.environ.get(f"{name}_FILE")
    if file_path:
        try:
            return Path(file_path).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE: cannot read {file_path}: {exc.strerror}") from exc
    return os.environ.get(name, default)


def string(name: str, default: str = "") -> str:
    value = raw(name)
    return default if value is None else value


def boolean(name: str, default: bool = False) -> bool:
    value = raw(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}: expected true or false, got {value!r}")


def number(name: str, default: float) -> float:
    return _parsed(name, default, float, "a number")


def integer(name: str, default: int) -> int:
    return _parsed(name, default, int, "an integer")


def _parsed(name: str, default: T, parse: Callable[[str], T], expected: str) -> T:
    value = raw(name)
    if value is None or value == "":
        return default
    try:
        return parse(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}: expected {expected}, got {value!r}") from exc


def choice(name: str, default: str, choices: set[str]) -> str:
    value = string(name, default).strip() or default
    if value not in choices:
        raise ImproperlyConfigured(f"{name}: expected one of {', '.join(sorted(choices))}, got {value!r}")
    return value


def csv(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in string(name, default).split(",") if item.strip()]


def networks(name: str, default: str = "") -> list[str]:
    """Comma-separated addresses or networks (``10.0.0.5``, ``10.0.8.0/24``, IPv6 alike)."""
    try:
        return [str(ipaddress.ip_network(item, strict=False)) for item in csv(name, default)]
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}: {exc}") from exc


def json_value(name: str, default: Any) -> Any:
    value = raw(name)
    if value is None or value.strip() == "":
        return default
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise ImproperlyConfigured(f"{name}: not valid JSON ({exc.msg})") from exc


def database(name: str, default: str) -> dict:
    value = string(name, default)
    scheme = value.partition("://")[0]
    # django-environ passes an unknown scheme through as the ENGINE, which fails
    # later with a message that does not name the variable.
    if "://" not in value or scheme not in environ.Env.DB_SCHEMES:
        raise ImproperlyConfigured(
            f"{name}: not a database URL (expected postgres://user:password@host:port/name or sqlite:///path)"
        )
    try:
        return environ.Env.db_url_config(value)
    except Exception as exc:  # django-environ raises several types for a bad URL
        raise ImproperlyConfigured(f"{name}: not a database URL ({exc})") from exc


def driver_modes(name: str, default: str, systems: set[str]) -> dict[str, str]:
    """``simulated``/``real`` for all systems, or ``system=mode`` pairs (``*`` for the rest)."""
    value = string(name, default).strip()
    modes = {"simulated", "real"}
    if value in modes:
        return {"*": value}
    result = {"*": "simulated"}
    for item in value.split(","):
        system, _, mode = item.strip().partition("=")
        if system not in systems | {"*"} or mode not in modes:
            raise ImproperlyConfigured(
                f"{name}: expected 'simulated', 'real' or pairs like 'maas=real' "
                f"for {sorted(systems)}, got {item!r}"
            )
        result[system] = mode
    return result
