"""Django's flush, without the post_migrate signal after this backend's DELETEs.

The signal makes content types and permissions again, all the flush keeps: a hundred
queries of nothing to do after each transactional test, four fifths of its flush
(2026-11-29). A flush that resets sequences empties those tables too, and still sends it.
"""

from django.core.management.commands import flush
from django.db import connections

from tests.support.flushing_postgresql.base import DatabaseOperations


class Command(flush.Command):
    def handle(self, **options):
        keeps = isinstance(connections[options["database"]].ops, DatabaseOperations)
        # Only the test case's flush says; `manage.py flush` and call_command reset them.
        if keeps and not options.get("reset_sequences", True):
            options["inhibit_post_migrate"] = True
        return super().handle(**options)
