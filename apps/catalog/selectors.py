"""What other apps read of the catalog."""

from __future__ import annotations

from apps.catalog.demo import APPS
from apps.catalog.services import PLATFORM

SHIPPED_SLUGS = frozenset(slug for slug, *_ in APPS)


def platform_ships(app_version) -> bool:
    """Whether the platform ships and trusts ``app_version``: one of the catalog apps it
    publishes itself (``apps/catalog/shipped``), in a version the platform published,
    not one an operator published under the same name."""
    return app_version.app.slug in SHIPPED_SLUGS and app_version.published_by == PLATFORM
