"""URIs of tables and results folders: what every store needs before pyarrow opens it."""
from __future__ import annotations

from urllib.parse import parse_qs, urlsplit, urlunsplit

# Seconds Google Cloud Storage may retry before a URI is refused: by default it retries for 15
# minutes, so a machine without a network or credentials would hang (S3 gives up in about 10 s).
GCS_RETRY_LIMIT_S = 8


def with_retry_limit(uri: str) -> str:
    """The URI with GCS_RETRY_LIMIT_S as its retry limit where its scheme retries for minutes
    (gs://, gcs://) and it sets none itself (`?retry_limit_seconds=`).

    Args:
      uri: a URI pyarrow.fs opens.

    Returns:
      The URI to open.
    """
    parts = urlsplit(uri)
    if parts.scheme not in ("gs", "gcs") or "retry_limit_seconds" in parse_qs(parts.query):
        return uri
    query = "&".join(part for part in (parts.query, f"retry_limit_seconds={GCS_RETRY_LIMIT_S}") if part)
    return urlunsplit(parts._replace(query=query))
