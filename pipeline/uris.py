"""URIs of tables and results folders: what every store needs before pyarrow opens it."""
from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit, urlunsplit

# Seconds Google Cloud Storage may retry before a URI is refused: by default it retries for 15
# minutes, so a machine without a network or credentials would hang (S3 gives up in about 10 s).
GCS_RETRY_LIMIT_S = 8
# Schemes whose client is a JVM (libhdfs): it writes its own log and stack traces to the process's
# stderr (file descriptor 2), dozens of lines when it cannot connect, after the config error's line.
JVM_SCHEMES = ("hdfs", "viewfs")


# Query options whose values are credentials (pyarrow's S3 `access_key`, `secret_key`,
# `session_token`, Azure's SAS `sig`, …): matched by these parts of their names.
_SECRET_VALUE = re.compile(r"([?&](?:[^=&#]*(?:secret|passw|token|key|credential|signature)[^=&#]*|sig)=)[^&#]*",
                           re.IGNORECASE)
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"]+")
REDACTED = "REDACTED"


def _redact_uri(uri: str) -> str:
    """One URI with its credentials replaced; every other character as written (`sqlite:////abs` stays)."""
    scheme, _, rest = uri.partition("://")
    end = min((rest.find(mark) for mark in "/?#" if mark in rest), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    if "@" in authority:  # user:password@host: the password goes, the user stays
        user, _, host = authority.rpartition("@")
        if ":" in user:
            authority = f"{user.split(':', 1)[0]}:{REDACTED}@{host}"
    tail = _SECRET_VALUE.sub(lambda match: f"{match.group(1)}{REDACTED}", tail)
    return f"{scheme}://{authority}{tail}"


def redact(text: str) -> str:
    """`text` with the credentials of every URI in it replaced by REDACTED: a password in the
    user part, and the values of query options that name a secret, key or token.

    Everything the pipeline records or prints (MLflow params and tags, the config.yaml
    artifact, the runs table, the console, error lines) goes through this; the stores are
    opened with the URI as written.

    Args:
      text: a URI, or a line that may hold some.

    Returns:
      The text, redacted.
    """
    return _URI.sub(lambda match: _redact_uri(match.group(0)), text) if "://" in text else text


def first_line(error: BaseException) -> str:
    """An error's first line (at most 300 characters), or its type's name: a store client's
    message can run to dozens of lines (libhdfs lists every JVM path it tried) or kilobytes."""
    text = str(error).strip()
    line = text.splitlines()[0] if text else type(error).__name__
    return line if len(line) <= 300 else line[:300] + "…"


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


class HeldOutput:
    """Where native output was held while a store was opened (see `native_output_held`)."""

    def __init__(self, path: str | None):
        self.path = path

    def note(self) -> str:
        """A note for an error line: where the held output went, if there was any."""
        if self.path is None or not os.path.exists(self.path) or not os.path.getsize(self.path):
            return ""
        with open(self.path, "rb") as held:
            lines = held.read().count(b"\n")
        return f"; the client's own output ({lines} lines) is in {self.path}"


@contextlib.contextmanager
def native_output_held(uri: str) -> Iterator[HeldOutput]:
    """While a store of `uri` is opened: what native code writes to stderr goes to a file, for
    the JVM schemes (JVM_SCHEMES) only, so that a refused URI stays one line. The file is kept
    when the block raises (the error can name it with `note`), deleted otherwise.

    Yields:
      The HeldOutput (its path None for other schemes).
    """
    if urlsplit(uri).scheme not in JVM_SCHEMES:
        yield HeldOutput(None)
        return
    sys.stderr.flush()
    held = tempfile.NamedTemporaryFile(prefix="shuffle-sco-jvm-", suffix=".log", delete=False)
    saved = os.dup(2)
    os.dup2(held.fileno(), 2)
    failed = True
    try:
        yield HeldOutput(held.name)
        failed = False
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        held.close()
        if not failed or not os.path.getsize(held.name):
            os.unlink(held.name)
