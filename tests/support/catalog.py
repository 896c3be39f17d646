"""Catalog apps published the way an operator publishes them."""

from __future__ import annotations

import copy

from apps.catalog import services as catalog
from apps.catalog.models import App
from tests.factories import AppFactory, shipped_manifest


def publish(
    slug: str, manifest: dict | None = None, *, entitled_to_all: bool = True, version: str = "1.0.0", **fields
) -> App:
    """``version`` of the app ``slug`` published: ``manifest``, or else the shipped app of
    that slug (apps/catalog/shipped/). A new app is made with ``entitled_to_all`` and
    ``fields``; an existing one gets another version."""
    app = App.objects.filter(slug=slug).first() or AppFactory(
        slug=slug, entitled_to_all=entitled_to_all, **fields
    )
    manifest = copy.deepcopy(manifest) if manifest is not None else shipped_manifest(slug)
    catalog.publish_version(None, app, version=version, manifest=manifest)
    return app
