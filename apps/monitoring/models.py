"""Monitoring: GPU telemetry, alert rules, alert subscriptions."""
