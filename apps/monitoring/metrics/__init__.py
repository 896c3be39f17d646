"""Where GPU telemetry is read: one interface (``MetricsSource``), two stores.

- ``prometheus``: PromQL over the HTTP API at ``GPUAAS_METRICS_URL``
  (VictoriaMetrics or Prometheus, scraping the agents' DCGM-form endpoints);
- ``embedded``: the samples agents report, kept in the platform's own database.

The metrics API, the charts and (later) the alert evaluator all read through
``source()``; none of them knows which store answers.
"""

from __future__ import annotations

from django.conf import settings

from apps.monitoring.metrics.base import MAX_GPUS_PER_NODE, METRICS, MetricsSource, Reading, Series

__all__ = ["MAX_GPUS_PER_NODE", "METRICS", "MetricsSource", "Reading", "Series", "source"]


def source() -> MetricsSource:
    if settings.METRICS_URL:
        from apps.monitoring.metrics.prometheus import PrometheusSource

        return PrometheusSource(settings.METRICS_URL)
    from apps.monitoring.metrics.embedded import EmbeddedSource

    return EmbeddedSource()
