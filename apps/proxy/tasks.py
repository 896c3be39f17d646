from celery import shared_task

from apps.proxy import idle, routes


@shared_task(name="apps.proxy.tasks.cull_idle")
def cull_idle() -> int:
    return len(idle.cull_idle())


@shared_task(name="apps.proxy.tasks.reconcile_routes")
def reconcile_routes() -> int:
    return routes.reconcile()
