"""The API's JSON bodies: an object, nested within reason.

DRF's parser passes whatever ``json.loads`` returns, so a list or a string reached
views that read ``request.data.get(...)`` (a 500), and 5,000 nested brackets raised
``RecursionError`` (a 500). Every endpoint of the API takes an object; anything else is
a 400 in the envelope before a view sees it.
"""

from __future__ import annotations

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class ObjectJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply.") from None
        if not isinstance(data, dict):
            raise ParseError("The body must be a JSON object.")
        return data
