"""What the runtime tells the apps above it, the platform proxy first (it connects in
``ProxyConfig.ready``), so the runtime never imports them. Each is sent inside the
transaction of the change; a receiver's error undoes it."""

from django.dispatch import Signal

# ``instance``, ``manifest``: launched, with its members and endpoints; the proxy
# decides how its UI is shown and plans its routes (and may refuse the launch).
instance_launched = Signal()

# ``instance``: it moved to another state (``states.transition``).
instance_moved = Signal()

# ``instance``: who may open it changed (shared or unshared).
instance_access_changed = Signal()
