from django.apps import AppConfig


class MeteringConfig(AppConfig):
    name = "apps.metering"
    label = "metering"

    def ready(self):
        from apps.tenancy import quotas

        quotas.quota_taken.connect(_follow_quota_warnings, dispatch_uid="metering-quota-warnings")


def _follow_quota_warnings(sender, tenant, **kwargs):
    from apps.metering.tasks import check_quota_thresholds

    check_quota_thresholds.delay(str(tenant.pk))
