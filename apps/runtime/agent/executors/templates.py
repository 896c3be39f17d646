"""The references a rendered task leaves for the agent: ``{{ port.NAME }}`` (the
host port the agent picked for an endpoint) and ``{{ secret.NAME }}`` (a value
fetched over the agent's authenticated channel, never stored in the task)."""

from __future__ import annotations

import re
from collections.abc import Callable

from apps.runtime.agent.executors.base import TaskFailed

# The same syntax as apps.catalog.manifests.TEMPLATE (the agent does not import Django code).
REFERENCE = re.compile(r"\{\{\s*(port|secret)\.([A-Za-z0-9_-]+)\s*\}\}")


def resolve(
    text: str,
    ports: dict[str, int],
    secrets: dict[str, str],
    secret_value: Callable[[str, str], str] | None = None,
) -> str:
    """``text`` with every reference replaced. ``secret_value(name, value)`` lets
    an executor substitute something else for a secret (a variable reference)."""

    def replace(match: re.Match) -> str:
        namespace, name = match.groups()
        values = ports if namespace == "port" else secrets
        if name not in values:
            raise TaskFailed(f"the task refers to {namespace} {name!r}, which it does not define")
        if namespace == "secret" and secret_value is not None:
            return secret_value(name, values[name])
        return str(values[name])

    return REFERENCE.sub(replace, text)


def resolve_all(items, ports: dict[str, int], secrets: dict[str, str], secret_value=None):
    """A list or a mapping of strings, resolved item by item."""
    if isinstance(items, dict):
        return {key: resolve(value, ports, secrets, secret_value) for key, value in items.items()}
    return [resolve(item, ports, secrets, secret_value) for item in items]
