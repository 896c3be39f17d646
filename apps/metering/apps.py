from django.apps import AppConfig


class MeteringConfig(AppConfig):
    name = "apps.metering"
    label = "metering"

    def ready(self):
        from apps.tenancy import quotas

        quotas.quota_taken.connect(_follow_quota_warnings, dispatch_uid="metering-quota-warnings")


def _follow_quota_warnings(sender, tenant, **kwargs):
    from apps.core import wakeups
    from apps.metering.tasks import check_quota_thresholds

    # The quota sweep (beat) checks every tenant too: a broker that is down costs a delay.
    wakeups.wake(check_quota_thresholds, str(tenant.pk))
