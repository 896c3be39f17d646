"""Node agent API (``/api/agent/v1/``): enrollment with the one-time bootstrap
token; then, with the node credential (``Authorization: Node <credential>``),
heartbeats, task fetch (long-poll), task results and the secrets of a claimed task."""

from __future__ import annotations

import asyncio
import contextlib
import math

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.http import JsonResponse
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.allocations import nodes
from apps.allocations.api.agent_auth import AgentView, NodeCredentialAuthentication
from apps.catalog import manifests
from apps.core.errors import Unauthenticated, error_json
from apps.monitoring import services as monitoring
from apps.monitoring.metrics import MAX_GPUS_PER_NODE
from apps.runtime import agents, events
from apps.runtime.models import AgentTask
from apps.tenancy.api.base import validated


class EnrollSerializer(serializers.Serializer):
    hostname = serializers.CharField(max_length=253)
    bootstrap_token = serializers.CharField(max_length=200, trim_whitespace=False)


class EnrolledSerializer(serializers.Serializer):
    node_id = serializers.UUIDField()
    credential = serializers.CharField(help_text="the node's own credential; shown once")
    approved = serializers.BooleanField()


class EnrollView(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(request=EnrollSerializer, responses={201: EnrolledSerializer}, summary="Agent enrollment")
    def post(self, request):
        data = validated(EnrollSerializer, request.data)
        # REMOTE_ADDR is the peer's address, or the one a trusted proxy (FORWARDED_ALLOW_IPS) saw.
        node, credential = nodes.enroll(
            data["hostname"],
            data["bootstrap_token"],
            address=request.META.get("REMOTE_ADDR"),
        )
        return Response(
            {"node_id": str(node.pk), "credential": credential, "approved": node.approved}, status=201
        )


class HeartbeatSerializer(serializers.Serializer):
    running = serializers.ListField(
        child=serializers.UUIDField(), required=False, help_text="instances the agent still runs"
    )


class HeartbeatView(AgentView):
    @extend_schema(request=HeartbeatSerializer, responses={204: None}, summary="Agent heartbeat")
    def post(self, request):
        data = validated(HeartbeatSerializer, request.data)
        running = data.get("running")
        agents.heartbeat(request.user.node, [str(i) for i in running] if running is not None else None)
        return Response(status=204)


class EndpointReportSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=40)
    host = serializers.CharField(
        max_length=255,
        help_text="an IP address: the one the agent enrolled from (any loopback address for an agent "
        "on the platform's own machine); any other host fails the task",
    )
    port = serializers.IntegerField(min_value=1, max_value=65535)


class TaskReportSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=["succeeded", "failed"])
    error = serializers.CharField(required=False, allow_blank=True, max_length=4000)
    # No more than an app declares: refused endpoints are audited whole.
    endpoints = EndpointReportSerializer(many=True, required=False, max_length=manifests.MAX_ENDPOINTS)


class TaskReportView(AgentView):
    @extend_schema(request=TaskReportSerializer, responses={204: None}, summary="Result of a task")
    def post(self, request, task_id):
        values = validated(TaskReportSerializer, request.data)
        agents.report_task(
            request.user.node,
            task_id,
            succeeded=values["status"] == "succeeded",
            error=values.get("error", ""),
            endpoints=values.get("endpoints", []),
        )
        return Response(status=204)


class TaskSecretsView(AgentView):
    @extend_schema(responses={200: dict}, summary="Secret values a claimed start task references")
    def get(self, request, task_id):
        return Response(
            agents.task_secrets(request.user.node, task_id), headers={"Cache-Control": "no-store"}
        )


# What one report of output may hold; the agent's own bounds (node_agent/logs.py) fit inside.
LOG_BATCH_LINES = 500
LOG_LINE_CHARS = 2000


class LogBatchSerializer(serializers.Serializer):
    lines = serializers.ListField(
        child=serializers.CharField(max_length=LOG_LINE_CHARS, allow_blank=True, trim_whitespace=False),
        max_length=LOG_BATCH_LINES,
        help_text="the workload's new lines of output (stdout and stderr), oldest first, without newlines",
    )
    dropped = serializers.IntegerField(
        min_value=0,
        max_value=2**31 - 1,
        default=0,
        help_text="lines the agent skipped before these (its buffer was full)",
    )


class LogAcceptedSerializer(serializers.Serializer):
    newest = serializers.IntegerField(help_text="the id of the newest line kept (0: nothing was sent)")


class InstanceLogsView(AgentView):
    @extend_schema(
        request=LogBatchSerializer,
        responses={200: LogAcceptedSerializer},
        summary="New output of a workload on this node",
    )
    def post(self, request, instance_id):
        values = validated(LogBatchSerializer, request.data)
        newest = agents.append_logs(
            request.user.node, instance_id, values["lines"], dropped=values["dropped"]
        )
        return Response({"newest": newest})


# A reading's time as the agent's clock says, bounded to what a datetime can hold.
LAST_UNIX_SECOND = 4_102_444_800  # 2100-01-01


class GpuReadingSerializer(serializers.Serializer):
    gpu = serializers.IntegerField(min_value=0, max_value=MAX_GPUS_PER_NODE - 1)
    uuid = serializers.CharField(max_length=64)
    at = serializers.FloatField(min_value=0, max_value=LAST_UNIX_SECOND, help_text="unix seconds")
    utilization = serializers.FloatField(min_value=0, max_value=100, help_text="%")
    memory_used = serializers.FloatField(min_value=0, help_text="MiB")
    memory_free = serializers.FloatField(min_value=0, help_text="MiB")
    temperature = serializers.FloatField(min_value=-50, max_value=200, help_text="C")
    power = serializers.FloatField(min_value=0, max_value=10000, help_text="W")

    def to_internal_value(self, data):
        # A report carries up to 512 readings, and DRF's field by field validation was four
        # fifths of taking them in (10.8 ms of CPU for 512, 2026-11-29): a reading of plain
        # numbers within the fields' bounds and a plain GPU UUID is taken as DRF would
        # take it, at once; any other goes DRF's way, which answers its errors.
        reading = _plain_reading(data)
        return reading if reading is not None else super().to_internal_value(data)


# Each number field of a reading: whether it is an integer, and its bounds.
_NUMBERS = {
    name: (isinstance(field, serializers.IntegerField), field.min_value, field.max_value)
    for name, field in GpuReadingSerializer._declared_fields.items()
    if isinstance(field, serializers.IntegerField | serializers.FloatField)
}
_UUID_LENGTH = GpuReadingSerializer._declared_fields["uuid"].max_length
_EXACT_FLOAT_INT = 2**53  # an integer a float holds exactly


def _plain_reading(data) -> dict | None:
    """``data`` as GpuReadingSerializer validates it, when it is a dict of ints, finite
    floats and an ASCII UUID without surrounding space, within bounds; otherwise None."""
    if type(data) is not dict:
        return None
    uuid = data.get("uuid")
    if (
        type(uuid) is not str
        or not 0 < len(uuid) <= _UUID_LENGTH
        or not uuid.isascii()
        or "\x00" in uuid
        or uuid != uuid.strip()
    ):
        return None
    reading = {"uuid": uuid}
    for name, (integer, low, high) in _NUMBERS.items():
        value = data.get(name)
        if type(value) is int and (integer or -_EXACT_FLOAT_INT <= value <= _EXACT_FLOAT_INT):
            value = value if integer else float(value)
        elif type(value) is not float or integer or not math.isfinite(value):
            return None  # bool, str, None, missing, NaN, ...: DRF's way
        if (low is not None and value < low) or (high is not None and value > high):
            return None
        reading[name] = value
    return reading


class XidReportSerializer(serializers.Serializer):
    gpu = serializers.IntegerField(min_value=0, max_value=MAX_GPUS_PER_NODE - 1)
    uuid = serializers.CharField(max_length=64, required=False, allow_blank=True)
    code = serializers.IntegerField(min_value=1, max_value=100000)
    at = serializers.FloatField(min_value=0, max_value=LAST_UNIX_SECOND, help_text="unix seconds")


class TelemetrySerializer(serializers.Serializer):
    # Bounded: a node has at most a few dozen GPUs, and reports every few seconds.
    readings = GpuReadingSerializer(many=True, required=False, max_length=MAX_GPUS_PER_NODE * 8)
    xids = XidReportSerializer(many=True, required=False, max_length=MAX_GPUS_PER_NODE)
    exporter_port = serializers.IntegerField(
        min_value=1, max_value=65535, required=False, help_text="where the agent serves its DCGM-form metrics"
    )
    simulated = serializers.BooleanField(
        default=False, help_text="the node has no NVIDIA GPUs: the agent reads the simulated world"
    )
    # Optional: agents from before these readings still report.
    cpu_utilization = serializers.FloatField(
        min_value=0, max_value=100, required=False, help_text="the node's CPU utilization (in %)"
    )
    memory_utilization = serializers.FloatField(
        min_value=0, max_value=100, required=False, help_text="the node's memory utilization (in %)"
    )


class TelemetryConfigSerializer(serializers.Serializer):
    report_readings = serializers.BooleanField(help_text="false: a metrics database scrapes the agent")
    interval_seconds = serializers.IntegerField()
    address = serializers.IPAddressField(allow_null=True, help_text="serve metrics on this address")
    gpus = serializers.IntegerField(required=False, help_text="simulated agents: the node's GPU count")
    held = serializers.DictField(
        required=False,
        help_text="simulated agents: readings simulate_gpu holds, per GPU index or 'all', "
        "and the node's own under 'node'",
    )


class TelemetryView(AgentView):
    @extend_schema(
        request=TelemetrySerializer,
        responses=TelemetryConfigSerializer,
        summary="GPU readings and XID errors",
    )
    def post(self, request):
        values = validated(TelemetrySerializer, request.data)
        return Response(
            monitoring.record_telemetry(
                request.user.node,
                readings=values.get("readings", []),
                xids=values.get("xids", []),
                exporter_port=values.get("exporter_port"),
                simulated=values["simulated"],
                cpu_utilization=values.get("cpu_utilization"),
                memory_utilization=values.get("memory_utilization"),
            )
        )


def _task_body(task, node) -> dict:
    return {
        "id": str(task.pk),
        "action": task.action,
        "instance_id": str(task.instance_id),
        "spec": task.spec,
        # Where the node publishes the task's endpoints: the only host its reports may
        # name (decision 0026). Sent with each task, so a re-enrolled agent follows.
        "address": node.agent_address,
        # Who may connect to them: the agent's firewall admits only these (decision 0037).
        "proxy_addresses": settings.PROXY_SOURCE_ADDRESSES,
    }


def document_fetch_tasks(result, generator, request, public):
    """drf-spectacular hook: ``fetch_tasks`` is a plain async view, which the schema
    generator does not see; it is described here, beside it."""
    task = {
        "type": "object",
        "required": ["id", "action", "instance_id", "spec", "address"],
        "properties": {
            "id": {"type": "string", "format": "uuid"},
            "action": {"type": "string", "enum": [choice.value for choice in AgentTask.Action]},
            "instance_id": {"type": "string", "format": "uuid"},
            "spec": {"type": "object", "additionalProperties": True},
            "address": {
                "type": "string",
                "nullable": True,
                "description": "the address the node publishes the task's endpoints on: the one "
                "its agent enrolled from, and the only host its report may name",
            },
            "proxy_addresses": {
                "type": "array",
                "items": {"type": "string"},
                "description": "the addresses or networks the platform proxy connects from: the "
                "only ones, besides the node itself, the agent lets reach the task's endpoints",
            },
        },
    }
    result.setdefault("paths", {})["/api/agent/v1/tasks"] = {
        "get": {
            "operationId": "api_agent_v1_tasks_list",
            "summary": "Claim the node's pending tasks, waiting up to `wait` seconds for one",
            "tags": ["agent"],
            "security": [{"nodeCredential": []}],
            "parameters": [
                {
                    "in": "query",
                    "name": "wait",
                    "required": False,
                    "schema": {"type": "number", "minimum": 0, "default": 0},
                    "description": f"seconds to wait for a task (at most {settings.AGENT_POLL_SECONDS})",
                }
            ],
            "responses": {
                "200": {
                    "description": "The tasks now claimed by this node (an empty list after the wait)",
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["tasks"],
                                "properties": {"tasks": {"type": "array", "items": task}},
                            }
                        }
                    },
                }
            },
        }
    }
    return result


async def fetch_tasks(request):
    """``GET /api/agent/v1/tasks?wait=25``: pending tasks, waiting up to ``wait``
    seconds for one to appear (woken through the channel layer, so a new task
    reaches the agent at once). Async, so a waiting agent holds no thread."""
    if request.method != "GET":  # a plain view answers every method; only GET may claim tasks
        response = error_json(405, "method_not_allowed", f'Method "{request.method}" not allowed.')
        response["Allow"] = "GET"
        return response
    scheme, _, credential = request.headers.get("Authorization", "").partition(" ")
    try:
        if scheme != NodeCredentialAuthentication.keyword:
            raise Unauthenticated("Expected 'Authorization: Node <credential>'.")
        node = await sync_to_async(nodes.authenticate_agent)(credential.strip())
    except Unauthenticated as exc:
        return error_json(401, exc.code, exc.message)
    try:
        wait = min(float(request.GET.get("wait", 0)), settings.AGENT_POLL_SECONDS)
    except ValueError:
        return error_json(
            400, "validation_error", "wait must be a number of seconds.", {"wait": ["Not a number."]}
        )
    tasks = await sync_to_async(agents.claim_tasks)(node)
    if not tasks and wait > 0:
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(events.agent_group(node.pk), channel)
        try:
            tasks = await sync_to_async(agents.claim_tasks)(node)  # one may have arrived while subscribing
            if not tasks:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(layer.receive(channel), timeout=wait)
                tasks = await sync_to_async(agents.claim_tasks)(node)
                if tasks:  # the node's address may have changed while this request waited
                    await sync_to_async(node.refresh_from_db)(fields=["agent_address"])
        finally:
            await layer.group_discard(events.agent_group(node.pk), channel)
    return JsonResponse({"tasks": [_task_body(task, node) for task in tasks]})
