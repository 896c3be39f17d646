"""Alerting, evaluated by the platform itself (the Grafana-managed model): rules on
the metrics source and the platform's own records (``rules``), an evaluation round
every ``GPUAAS_ALERT_EVALUATION_SECONDS`` that moves each alert through pending,
firing and resolved (``evaluation``), and delivery of each firing and resolution
through the webhooks outbox to CCP and to the subscriptions that match
(``delivery``, ``subscriptions``)."""
