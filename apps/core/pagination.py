from rest_framework.pagination import PageNumberPagination


class Pagination(PageNumberPagination):
    """``{"count", "next", "previous", "results"}`` with ``?page=`` and ``?page_size=`` (max 500)."""

    page_size_query_param = "page_size"
    max_page_size = 500
