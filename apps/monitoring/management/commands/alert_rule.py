"""``alert_rule NAME [--threshold X] [--for SECONDS] [--enabled true|false]`` changes
one alert rule (audited); ``alert_rule --list`` names them with their settings."""

from django.core.management.base import BaseCommand, CommandError

from apps.core.errors import ApiError
from apps.monitoring.alerts import services
from apps.monitoring.models import AlertRule
from apps.tenancy.principal import OPERATOR_CLI


def _boolean(text: str) -> bool:
    lowered = text.lower()
    if lowered not in ("true", "false"):
        raise ValueError(text)
    return lowered == "true"


class Command(BaseCommand):
    help = "Change an alert rule's threshold, for duration or whether it is on; --list names them."

    def add_arguments(self, parser):
        parser.add_argument("name", nargs="?", help="the rule, e.g. gpu_temperature_critical")
        parser.add_argument("--threshold", type=float, help="fires above this value")
        parser.add_argument("--for", dest="for_seconds", type=int, help="seconds above the threshold")
        parser.add_argument("--enabled", type=_boolean, help="true or false")
        parser.add_argument("--list", action="store_true", help="list the rules")

    def handle(self, *args, name, threshold, for_seconds, enabled, list, **options):
        if list:
            for rule in AlertRule.objects.order_by("name"):
                self.stdout.write(
                    f"{rule.name}\t> {rule.threshold:g}\tfor {rule.for_seconds}s\t"
                    f"{'enabled' if rule.enabled else 'disabled'}\t{rule.description}"
                )
            return
        if not name:
            raise CommandError("Name a rule (alert_rule --list names them).")
        if threshold is None and for_seconds is None and enabled is None:
            raise CommandError("Give --threshold, --for or --enabled.")
        try:
            rule = services.change_rule(
                OPERATOR_CLI, name, threshold=threshold, for_seconds=for_seconds, enabled=enabled
            )
        except ApiError as exc:
            raise CommandError(exc.message if not exc.details else f"{exc.message} {exc.details}") from None
        self.stdout.write(
            f"{rule.name}: > {rule.threshold:g} for {rule.for_seconds}s, "
            f"{'enabled' if rule.enabled else 'disabled'}"
        )
