"""App manifests: validation against the versioned JSON Schema kept beside this
module, the semantic checks a schema cannot express, and launch parameters.

Templates in a manifest (``args``, ``env``, ``process.command``,
``proxy.base_url_arg``) may use ``{{ params.NAME }}``, ``{{ instance.id }}``,
``{{ proxy.base_path }}``, ``{{ member.rank }}``, ``{{ member.count }}`` and
``{{ member.primary_host }}`` (a clustered app's member; rendered by the platform)
and ``{{ port.ENDPOINT }}``
and ``{{ secret.NAME }}`` (left as references for the node agent to resolve, so
a task never carries a secret's value). A ``secret.NAME`` is the platform's own
(``token``) or a parameter of type ``secret``, whose launch value names one of the
project's secrets (``POST /api/v1/projects/{id}/secrets``): the agent gets that
secret's value as it gets the token.
"""

from __future__ import annotations

import json
import math
import re
from functools import cache
from pathlib import Path

from jsonschema import Draft202012Validator

SCHEMA_VERSIONS = {"1": Path(__file__).parent / "schemas" / "manifest-v1.json"}
TEMPLATE = re.compile(r"\{\{\s*([a-z_]+)\.([A-Za-z0-9_-]+)\s*\}\}")
PLATFORM_SECRETS = {"token"}  # runtime secrets the platform generates per instance
# The name of a project's secret, as a ``secret`` parameter's value gives it (anchored:
# form fields search, the manifest checks match whole).
SECRET_NAME = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
RUNTIME_NAMESPACES = {"port", "secret", "node"}  # the agent resolves these
# An app's endpoints, and so what its node's agent may report (the agent API refuses more).
MAX_ENDPOINTS = 64


@cache
def _validator(version: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads(SCHEMA_VERSIONS[version].read_text()))


def _path(error) -> str:
    return "/".join(str(part) for part in error.absolute_path) or "(manifest)"


def validate(manifest) -> list[str]:
    """Every problem with the manifest, as ``path: message`` lines (empty when valid)."""
    if not isinstance(manifest, dict):
        return ["(manifest): must be a JSON object"]
    version = str(manifest.get("schema_version", ""))
    if version not in SCHEMA_VERSIONS:
        return [f"schema_version: unknown version {version!r}; known: {', '.join(sorted(SCHEMA_VERSIONS))}"]
    errors = [f"{_path(e)}: {e.message}" for e in sorted(_validator(version).iter_errors(manifest), key=str)]
    if errors:
        return errors
    return _semantic_errors(manifest)


def _semantic_errors(manifest: dict) -> list[str]:
    params = {p["name"]: p for p in manifest.get("parameters", [])}
    artifacts = {a["name"] for a in manifest["artifacts"]}
    endpoints = {e["name"] for e in manifest["endpoints"]}
    errors = _duplicate_name_errors(manifest) + _default_errors(params)
    errors += _execution_errors(manifest, params, artifacts, endpoints)
    if isinstance(manifest["resources"]["gpus"], str):
        errors += _gpu_parameter_errors("resources/gpus", manifest["resources"]["gpus"], params)
    if len(manifest["endpoints"]) > MAX_ENDPOINTS:
        errors.append(f"endpoints: at most {MAX_ENDPOINTS}")
    cluster = manifest.get("cluster")
    if cluster and cluster["min_members"] > cluster["max_members"]:
        errors.append("cluster: min_members is more than max_members")
    for endpoint in manifest["endpoints"]:
        if "platform_proxy" in endpoint["exposure_modes"] and endpoint["protocol"] != "http":
            errors.append(f"endpoints/{endpoint['name']}: only http endpoints can use platform_proxy")
    return errors + _template_errors(manifest, params, endpoints)


def _duplicate_name_errors(manifest: dict) -> list[str]:
    errors = []
    for kind, names in (
        ("parameters", [p["name"] for p in manifest.get("parameters", [])]),
        ("artifacts", [a["name"] for a in manifest["artifacts"]]),
        ("endpoints", [e["name"] for e in manifest["endpoints"]]),
    ):
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            errors.append(f"{kind}: duplicate names {', '.join(duplicates)}")
    return errors


def _default_errors(params: dict) -> list[str]:
    errors = []
    for param in params.values():
        if "default" in param:
            problem = parameter_error(param, param["default"])
            if problem:
                errors.append(f"parameters/{param['name']}/default: {problem}")
    return errors


def _execution_errors(manifest: dict, params: dict, artifacts: set, endpoints: set) -> list[str]:
    execution = manifest["execution"]
    if execution["kind"] == "single_container":
        if execution.get("artifact", manifest["artifacts"][0]["name"]) not in artifacts:
            return [f"execution/artifact: no artifact named {execution['artifact']!r}"]
        return []
    services = [s["name"] for s in execution["services"]]
    errors = []
    for service in execution["services"]:
        errors += _service_errors(service, services, params, artifacts, endpoints)
    return errors


def _service_errors(service: dict, services: list, params: dict, artifacts: set, endpoints: set) -> list[str]:
    where = f"execution/services/{service['name']}"
    errors = []
    if service["artifact"] not in artifacts:
        errors.append(f"{where}/artifact: no artifact named {service['artifact']!r}")
    errors += [
        f"{where}/endpoints: no endpoint named {endpoint!r}"
        for endpoint in service.get("endpoints", [])
        if endpoint not in endpoints
    ]
    errors += [
        f"{where}/depends_on: no service {dependency!r}"
        for dependency in service.get("depends_on", [])
        if dependency not in services
    ]
    if isinstance(service.get("gpus"), str):
        errors += _gpu_parameter_errors(f"{where}/gpus", service["gpus"], params)
    optional = service.get("optional_parameter")
    if optional and params.get(optional, {}).get("type") != "boolean":
        errors.append(f"{where}/optional_parameter: {optional!r} must be a boolean parameter")
    return errors


def secret_parameters(manifest: dict) -> set[str]:
    """The parameters whose value names a project secret."""
    return {p["name"] for p in manifest.get("parameters", []) if p["type"] == "secret"}


def _template_errors(manifest: dict, params: dict, endpoints: set) -> list[str]:
    secret_params = secret_parameters(manifest)
    errors = [
        f"parameters/{name}: the platform's own secret is named {name}; choose another name"
        for name in secret_params & PLATFORM_SECRETS
    ]
    errors += [
        f"{where}: {{{{ params.{name} }}}} is a secret parameter; use {{{{ secret.{name} }}}}"
        for where, template in template_fields(manifest)
        for namespace, name in TEMPLATE.findall(template)
        if namespace == "params" and name in secret_params
    ]
    known = {
        "params": params,
        "port": endpoints,
        "secret": PLATFORM_SECRETS | secret_params,
        "instance": {"id"},
        "proxy": {"base_path"},
        "member": {"rank", "count", "primary_host"},
        "node": {"address"},
    }
    return errors + [
        f"{where}: unknown template reference {{{{ {namespace}.{name} }}}}"
        for where, template in template_fields(manifest)
        for namespace, name in TEMPLATE.findall(template)
        if name not in known.get(namespace, ())
    ]


def gpu_count(value, parameters: dict) -> int:
    """``resources.gpus`` or a service's ``gpus``: a number or ``{{ params.NAME }}``."""
    if isinstance(value, int):
        return value
    _, name = TEMPLATE.fullmatch(value.strip()).groups()
    return int(parameters[name])


def proxied_endpoints(manifest: dict) -> list[dict]:
    """The endpoints the manifest lets the platform proxy expose."""
    return [e for e in manifest["endpoints"] if "platform_proxy" in e["exposure_modes"]]


def template_fields(manifest: dict):
    execution = manifest["execution"]
    units = (
        [("execution", execution)]
        if execution["kind"] == "single_container"
        else [(f"execution/services/{s['name']}", s) for s in execution["services"]]
    )
    for where, unit in units:
        for index, arg in enumerate(unit.get("args", [])):
            yield f"{where}/args/{index}", arg
        for key, value in unit.get("env", {}).items():
            yield f"{where}/env/{key}", value
    process = manifest.get("process")
    if process:
        for index, arg in enumerate(process["command"]):
            yield f"process/command/{index}", arg
        for key, value in process.get("env", {}).items():
            yield f"process/env/{key}", value
    for endpoint in manifest["endpoints"]:
        arg = endpoint.get("proxy", {}).get("base_url_arg")
        if arg:
            yield f"endpoints/{endpoint['name']}/proxy/base_url_arg", arg
    if isinstance(manifest["resources"]["gpus"], str):
        yield "resources/gpus", manifest["resources"]["gpus"]


def _gpu_parameter_errors(where: str, template: str, params: dict) -> list[str]:
    name = TEMPLATE.fullmatch(template.strip()).group(2)
    param = params.get(name)
    if param is None:
        return []  # reported as an unknown template reference
    values = param.get("choices") or [param.get("default")]
    if param["type"] not in ("integer", "choice") or not all(isinstance(v, int) and v >= 0 for v in values):
        return [f"{where}: {name!r} must be a whole-number parameter"]
    return []


def parameter_error(param: dict, value) -> str | None:
    """Why ``value`` is not acceptable for ``param``, or None."""
    kind = param["type"]
    if kind == "boolean":
        return None if isinstance(value, bool) else "must be true or false"
    if kind == "choice":
        return (
            None if value in param["choices"] else f"must be one of {', '.join(map(str, param['choices']))}"
        )
    if kind in ("integer", "number"):
        # An int is whole however large (float() of one would overflow); JSON reads 1e400 as
        # infinity, which no range check refuses and the database's JSON cannot keep.
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or (isinstance(value, float) and not math.isfinite(value))
            or (kind == "integer" and isinstance(value, float) and not value.is_integer())
        ):
            return f"must be {'a whole number' if kind == 'integer' else 'a number'}"
        if "minimum" in param and value < param["minimum"]:
            return f"must be at least {param['minimum']}"
        if "maximum" in param and value > param["maximum"]:
            return f"must be at most {param['maximum']}"
        return None
    if not isinstance(value, str):
        return "must be text"
    if "\x00" in value:  # the database's JSON cannot keep one
        return "has a NUL byte"
    if kind == "secret":
        return None if SECRET_NAME.fullmatch(value) else "must name one of the project's secrets"
    if len(value) > param.get("max_length", 500):
        return f"must be at most {param.get('max_length', 500)} characters"
    if "pattern" in param and not re.fullmatch(param["pattern"], value):
        return "has the wrong format"
    return None


def clean_parameters(manifest: dict, values: dict | None) -> tuple[dict, dict[str, list[str]]]:
    """Launch values checked against the manifest: ``(cleaned, errors_by_field)``."""
    values = dict(values or {})
    cleaned, errors = {}, {}
    declared = {p["name"]: p for p in manifest.get("parameters", [])}
    for name in values.keys() - declared.keys():
        errors[name] = ["Not a parameter of this app."]
    for name, param in declared.items():
        if name not in values or values[name] in ("", None):
            if "default" in param:
                cleaned[name] = param["default"]
            elif param.get("required"):
                errors[name] = ["This parameter is required."]
            continue
        value = values[name]
        if param["type"] == "integer" and isinstance(value, float) and value.is_integer():
            value = int(value)
        problem = parameter_error(param, value)
        if problem:
            errors[name] = [problem[0].upper() + problem[1:] + "."]
        else:
            cleaned[name] = value
    return cleaned, errors
