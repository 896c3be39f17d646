from django.apps import AppConfig


class StorageConfig(AppConfig):
    name = "apps.storage"
    label = "storage"
