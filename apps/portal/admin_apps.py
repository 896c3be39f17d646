"""The Django admin, with the operations front page as its site (``operations``).

Its own module: an ``AppConfig`` subclass in ``apps.py`` would compete with
``PortalConfig`` as the portal's default configuration.
"""

from django.contrib.admin.apps import AdminConfig


class OperationsAdminConfig(AdminConfig):
    default_site = "apps.portal.operations.OperationsAdminSite"
