"""Executors run one instance's workload on this node: ``process`` (local
processes, the embedded default) or ``docker`` (a container engine)."""
