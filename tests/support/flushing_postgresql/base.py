"""PostgreSQL for the tests, with a cheaper flush after each transactional test.

Django empties every table after a transactional test with one TRUNCATE, which makes
new files for each of the schema's tables and their indexes: about a second a test on
this machine, and 259 of `make check`'s tests flush. What a test leaves behind is a
few rows, so DELETE is milliseconds. Content types and permissions stay: the flush's
post_migrate would only make them again, under new ids (this package's ``flush``
command does not send it).
"""

from django.db.backends.postgresql import base, operations

KEPT = frozenset({"django_content_type", "auth_permission"})


class DatabaseOperations(operations.DatabaseOperations):
    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences:
            return super().sql_flush(
                style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        emptied = [table for table in tables if table not in KEPT]
        if not emptied:
            return []
        # Every table is emptied in one transaction, so no foreign key is left dangling:
        # its checks are switched off for it rather than ordering the tables.
        return [
            "SET LOCAL session_replication_role = replica;",
            *(f"DELETE FROM {self.quote_name(table)};" for table in emptied),
        ]


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
