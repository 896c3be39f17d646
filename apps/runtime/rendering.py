"""Rendering a typed node-agent task from a manifest and launch values.

The platform fills in parameters, the instance id and the proxy base path;
``{{ port.X }}``, ``{{ secret.X }}`` and ``{{ node.address }}`` stay as references
that only the agent resolves (it picks host ports, fetches secrets over its
authenticated channel, and learns its address with each task), so a task never
carries a secret. Compose projects are built by a
platform-owned renderer from the manifest's logical services, never from user
YAML. Every image is referenced by digest; no host paths, no privileged mode.
"""

from __future__ import annotations

from collections.abc import Callable

from apps.catalog.manifests import (
    RUNTIME_NAMESPACES,
    TEMPLATE,
    gpu_count,
    proxied_endpoints,
    template_fields,
)

# Where an endpoint's upstream runs is the platform proxy's to say (its routes serve
# it there); the proxy sits above the runtime, so it provides it (``ProxyConfig.ready``).
_base_path: Callable[[object, str], str] | None = None


def provide_base_path(base_path: Callable[[object, str], str]) -> None:
    """``base_path(instance_id, endpoint)``: the path the app serves its endpoint under."""
    global _base_path
    _base_path = base_path


def _fill(template: str, context: dict) -> str:
    def replace(match):
        namespace, name = match.groups()
        if namespace in RUNTIME_NAMESPACES:
            return match.group(0)  # the agent's to resolve
        return str(context[namespace][name])

    return TEMPLATE.sub(replace, template)


def _fill_all(items, context):
    if isinstance(items, dict):
        return {key: _fill(value, context) for key, value in items.items()}
    return [_fill(item, context) for item in items]


def _context(instance, member) -> dict:
    proxied = proxied_endpoints(instance.manifest)
    primary = proxied[0]["name"] if proxied else instance.manifest["endpoints"][0]["name"]
    return {
        "params": {key: _format(value) for key, value in instance.parameters.items()},
        "instance": {"id": str(instance.pk)},
        "proxy": {"base_path": _base_path(instance.pk, primary)},
        "member": _member(instance, member),
    }


def _member(instance, member) -> dict:
    """Where a member stands in its cluster. Without one (what a launch renders to
    learn the secrets it needs) the instance is its own single primary."""
    if member is None:
        return {"rank": 0, "count": 1, "primary_host": "localhost"}
    members = list(instance.members.select_related("node").order_by("rank"))
    return {"rank": member.rank, "count": len(members), "primary_host": members[0].node.hostname}


def _format(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _artifacts(manifest: dict) -> dict[str, str]:
    return {a["name"]: f"{a['image']}@{a['digest']}" for a in manifest["artifacts"]}


def _labels(instance) -> dict[str, str]:
    return {
        "gpuaas.instance": str(instance.pk),
        "gpuaas.project": str(instance.project_id),
        "gpuaas.app": instance.app.slug,
    }


def _endpoint_args(manifest: dict, context: dict) -> list[str]:
    return [
        _fill(e["proxy"]["base_url_arg"], context)
        for e in manifest["endpoints"]
        if e.get("proxy", {}).get("base_url_aware") and e["proxy"].get("base_url_arg")
    ]


def _secrets(manifest: dict) -> list[str]:
    found = set()
    for _, text in template_fields(manifest):
        found.update(name for namespace, name in TEMPLATE.findall(text) if namespace == "secret")
    return sorted(found)


def start_spec(instance, member=None) -> dict:
    """The start task for one member (the primary when not said)."""
    manifest = instance.manifest
    context = _context(instance, member)
    images = _artifacts(manifest)
    execution = manifest["execution"]
    endpoints = [
        {"name": e["name"], "protocol": e["protocol"], "container_port": e["container_port"]}
        for e in manifest["endpoints"]
    ]
    spec = {
        "instance_id": str(instance.pk),
        "name": f"gpuaas-{instance.pk}",
        "execution": execution["kind"],
        "endpoints": endpoints,
        "secrets": _secrets(manifest),
        "labels": _labels(instance),
        "resources": {
            **manifest["resources"],
            "gpus": gpu_count(manifest["resources"]["gpus"], instance.parameters),
        },
    }
    if execution["kind"] == "single_container":
        artifact = execution.get("artifact", manifest["artifacts"][0]["name"])
        spec["container"] = {
            "image": images[artifact],
            "args": _fill_all(execution.get("args", []), context) + _endpoint_args(manifest, context),
            "env": _fill_all(execution.get("env", {}), context),
            "gpus": gpu_count(manifest["resources"]["gpus"], instance.parameters),
        }
    else:
        spec["compose"] = COMPOSE_RENDERERS[execution["renderer"]](instance, manifest, context, images)
    process = manifest.get("process")
    if process:
        spec["process"] = {
            "command": _fill_all(process["command"], context),
            "env": _fill_all(process.get("env", {}), context),
            "ready_path": _fill(process.get("ready_path", "/"), context),
        }
    return spec


def stop_spec(instance) -> dict:
    return {
        "instance_id": str(instance.pk),
        "name": f"gpuaas-{instance.pk}",
        "execution": instance.manifest["execution"]["kind"],
    }


def _vllm_openai_chat(instance, manifest: dict, context: dict, images: dict) -> dict:
    """vLLM's OpenAI-compatible server, and optionally a chat UI talking to it."""
    ports = {e["name"]: e["container_port"] for e in manifest["endpoints"]}
    services = {}
    for service in manifest["execution"]["services"]:
        optional = service.get("optional_parameter")
        if optional and not instance.parameters.get(optional):
            continue
        definition = {
            "image": images[service["artifact"]],
            "environment": _fill_all(service.get("env", {}), context),
            "labels": _labels(instance),
            "restart": "unless-stopped",
            "read_only": False,
            "security_opt": ["no-new-privileges:true"],
            "cap_drop": ["ALL"],
            "ports": [
                f"{{{{ node.address }}}}:{{{{ port.{name} }}}}:{ports[name]}"
                for name in service.get("endpoints", [])
            ],
        }
        if service.get("args"):  # an empty command would replace the image's own
            definition["command"] = _fill_all(service["args"], context)
        gpus = gpu_count(service.get("gpus", 0), instance.parameters)
        if gpus:
            definition["deploy"] = {
                "resources": {
                    "reservations": {
                        "devices": [{"driver": "nvidia", "count": gpus, "capabilities": ["gpu"]}]
                    }
                }
            }
        if service.get("depends_on"):
            definition["depends_on"] = list(service["depends_on"])
        services[service["name"]] = definition
    return {
        "project": f"gpuaas-{instance.pk}",
        "renderer": "vllm-openai-chat",
        "document": {"name": f"gpuaas-{instance.pk}", "services": services},
    }


COMPOSE_RENDERERS = {"vllm-openai-chat": _vllm_openai_chat}
