import sys

# jsonschema imports rfc3987-syntax whenever it is installed (JupyterLab's
# jupyter-events asks for it), and that module builds a Lark grammar on import:
# 1.4 s of every process's start (manage.py, web, workers, each test process) for
# the "iri" formats, which the platform never checks (it passes no FormatChecker).
# Blocked before anything imports jsonschema; JupyterLab runs in processes of its
# own and keeps it (decision 0073).
sys.modules.setdefault("rfc3987_syntax", None)

from .celery import app as celery_app  # noqa: E402

__all__ = ["celery_app"]
