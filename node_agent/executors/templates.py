"""The references a rendered task leaves for the agent: ``{{ port.NAME }}`` (the
host port the agent picked for an endpoint), ``{{ secret.NAME }}`` (a value
fetched over the agent's authenticated channel, never stored in the task) and
``{{ node.address }}`` (the address the node publishes its apps on: the one the
platform saw its agent enroll from, decision 0026)."""

from __future__ import annotations

import re
from collections.abc import Callable

from node_agent.executors.base import TaskFailed

# The same syntax as apps.catalog.manifests.TEMPLATE (the agent does not import Django code).
REFERENCE = re.compile(r"\{\{\s*(port|secret|node)\.([A-Za-z0-9_-]+)\s*\}\}")


def references(ports: dict[str, int], secrets: dict[str, str], address: str) -> dict[str, dict]:
    """What a task's references resolve to, by namespace."""
    return {"port": ports, "secret": secrets, "node": {"address": address}}


def resolve(
    text: str,
    values: dict[str, dict],
    secret_value: Callable[[str, str], str] | None = None,
) -> str:
    """``text`` with every reference replaced from ``values`` (see ``references``).
    ``secret_value(name, value)`` lets an executor substitute something else for a
    secret (a variable reference)."""

    def replace(match: re.Match) -> str:
        namespace, name = match.groups()
        known = values[namespace]
        if name not in known:
            raise TaskFailed(f"the task refers to {namespace} {name!r}, which it does not define")
        if namespace == "secret" and secret_value is not None:
            return secret_value(name, known[name])
        return str(known[name])

    return REFERENCE.sub(replace, text)


def resolve_all(items, values: dict[str, dict]):
    """A list or a mapping of strings, resolved item by item."""
    if isinstance(items, dict):
        return {key: resolve(value, values) for key, value in items.items()}
    return [resolve(item, values) for item in items]
