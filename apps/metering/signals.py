"""What metering tells the apps above it (monitoring turns these into alerts).

Both are sent after the commit that recorded the change, with ``tenant``,
``resource``, ``level`` (``"80"``/``"90"``, or ``"none"`` once cleared to below 80 %),
``previous`` (the level before), ``rule`` (``storage_quota`` for
``storage_used_gb``, how full the tenant's directory is on DDN; ``quota`` for the
quota resources: the alert rule family, CONTRACT.md "Monitoring and alerts"),
``percent``, ``used``, ``limit`` and ``crossing`` (the ``QuotaCrossing`` raised, or
the one cleared).
"""

from django.dispatch import Signal

# Usage rose past 80 % or 90 % of a limit: sent once per crossing.
quota_threshold_crossed = Signal()
# Usage fell back below a level it had crossed: that level is armed again.
quota_threshold_cleared = Signal()
