"""The alert rules the platform ships: seed 001 section 4.7.2's thresholds and
``for`` durations, one rule per metric and severity. Written once; operators change
them afterwards (admin, ``alert_rule``), and a second run keeps their changes."""

from django.db import migrations

# name: (metric, severity, threshold, for seconds, description)
SHIPPED = {
    "gpu_temperature_warning": ("gpu_temperature", "warning", 80, 300, "GPU temperature > 80 C for 5 min"),
    "gpu_temperature_critical": ("gpu_temperature", "critical", 90, 120, "GPU temperature > 90 C for 2 min"),
    "gpu_memory_warning": ("gpu_memory", "warning", 90, 900, "GPU memory use > 90 % for 15 min"),
    "gpu_memory_critical": ("gpu_memory", "critical", 95, 0, "GPU memory use > 95 %"),
    "cpu_utilization_warning": ("cpu_utilization", "warning", 75, 0, "Node CPU utilization > 75 %"),
    "cpu_utilization_critical": ("cpu_utilization", "critical", 90, 0, "Node CPU utilization > 90 %"),
    "memory_utilization_warning": ("memory_utilization", "warning", 70, 0, "Node memory utilization > 70 %"),
    "memory_utilization_critical": ("memory_utilization", "critical", 85, 0, "Node memory utilization > 85 %"),
    "storage_quota_warning": ("storage_quota", "warning", 80, 0, "DDN storage quota > 80 % used"),
    "storage_quota_critical": ("storage_quota", "critical", 90, 0, "DDN storage quota > 90 % used"),
    "quota_warning": ("quota", "warning", 80, 0, "Tenant quota > 80 % used"),
    "quota_critical": ("quota", "critical", 90, 0, "Tenant quota > 90 % used"),
    # Down: the agent silent past GPUAAS_AGENT_OFFLINE_AFTER_SECONDS; warning per
    # node after 2 min, critical when 2+ nodes of one cluster are down as long.
    "node_not_ready_warning": ("node_not_ready", "warning", 0, 120, "1 node down > 2 min"),
    "node_not_ready_critical": ("node_not_ready", "critical", 1, 120, "2+ nodes of a cluster down"),
    "storage_latency_warning": ("storage_latency", "warning", 10, 0, "DDN storage latency > 10 ms"),
    "storage_latency_critical": ("storage_latency", "critical", 15, 0, "DDN storage latency > 15 ms"),
    # An open XID event, graded by the platform's XID catalogue (apps.monitoring.xid).
    "gpu_xid_warning": ("gpu_xid", "warning", 0, 0, "XID error (warning grade) on a GPU"),
    "gpu_xid_critical": ("gpu_xid", "critical", 0, 0, "XID error (critical grade) on a GPU"),
}


def ship(apps, schema_editor):
    AlertRule = apps.get_model("monitoring", "AlertRule")
    # One statement; a rule already there is left as it is (ON CONFLICT DO NOTHING).
    AlertRule.objects.bulk_create(
        [
            AlertRule(
                name=name,
                metric=metric,
                severity=severity,
                threshold=threshold,
                for_seconds=for_seconds,
                description=description,
            )
            for name, (metric, severity, threshold, for_seconds, description) in SHIPPED.items()
        ],
        ignore_conflicts=True,
    )


def unship(apps, schema_editor):
    apps.get_model("monitoring", "AlertRule").objects.filter(name__in=SHIPPED).delete()


class Migration(migrations.Migration):
    dependencies = [("monitoring", "0002_alert_rules_and_subscriptions")]

    operations = [migrations.RunPython(ship, unship)]
