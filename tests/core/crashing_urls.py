"""The project's URLs and a page that fails, for the 500 page's tests."""

from django.urls import path

from gpuaas.urls import handler400, handler403, handler404, handler500, urlpatterns  # noqa: F401


def crash(request):
    raise RuntimeError("the database password is hunter2")


urlpatterns = [path("crash/", crash), *urlpatterns]
