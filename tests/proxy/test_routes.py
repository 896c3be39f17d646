import pytest

from apps.proxy.models import ProxyRoute
from apps.runtime import services as runtime
from apps.tenancy import principal as principals
from tests.proxy.conftest import proxied_manifest, publish_manifest, start_instance

pytestmark = pytest.mark.django_db


def test_route_is_planned_at_launch_active_while_running_and_removed_on_stop(owner, project, active_allocation):
    app = publish_manifest("webapp", proxied_manifest())
    instance = start_instance(owner, project, active_allocation, app, host="10.0.0.5", port=41000)
    route = ProxyRoute.objects.get(instance=instance)
    assert (route.status, route.upstream_host, route.upstream_port) == ("active", "10.0.0.5", 41000)
    assert route.public_url.endswith(f"/w/{instance.pk}/web/") and route.mode == "path_prefix"
    runtime.change(principals.for_user(owner), instance, "stop")
    route.refresh_from_db()
    assert (route.status, route.upstream_host, route.upstream_port) == ("removed", "", None)
