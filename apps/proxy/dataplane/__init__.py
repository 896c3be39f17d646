"""The platform proxy's data plane: an ASGI reverse proxy in front of Django.

``dispatch.ProxyDispatcher`` sends route traffic (``/w/…``, ``/_gpuaas/…`` and
hosts under the apps domain) here before Django's middleware sees it, so bodies
stream without buffering. The control plane (``apps.proxy.access``) answers
which route a request is for and whether its holder may use it; this package
only moves bytes and applies the header, cookie and redaction rules of
CONTRACT.md "Platform proxy".
"""
