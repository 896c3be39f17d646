from celery import shared_task

from apps.proxy import idle, routes, sessions


@shared_task(name="apps.proxy.tasks.cull_idle")
def cull_idle() -> int:
    return len(idle.cull_idle())


@shared_task(name="apps.proxy.tasks.reconcile_routes")
def reconcile_routes() -> int:
    return routes.reconcile()


@shared_task(name="apps.proxy.tasks.prune_sessions")
def prune_sessions() -> int:
    return sessions.prune_sessions()
