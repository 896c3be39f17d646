"""The node agent: a small program on each GPU node that enrolls with the
platform, heartbeats, long-polls rendered tasks (start, stop, remove one app
instance's workload), runs them through an executor (local processes or a
container engine) and reports results and endpoints.

It speaks only HTTP to ``/api/agent/v1/`` and imports nothing from Django, so
the same code runs on a real node (``python -m node_agent``) and as the
embedded default's local agent (``manage.py run_node_agent``).
"""
