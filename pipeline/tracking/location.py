"""Where results go: a local path or a URI (file://, s3://, gs://, hdfs://, abfs://),
opened through pyarrow.fs, with whole-file writes on every kind of store."""
from __future__ import annotations

import dataclasses
import io
import os
import secrets
from pathlib import Path
from typing import BinaryIO, Callable
from urllib.parse import urlparse, urlsplit

import pyarrow.fs as pafs

from pipeline.errors import ConfigError
from pipeline.uris import first_line, native_output_held, redact, with_retry_limit

# Schemes pyarrow.fs opens; anything else with "://" is refused instead of becoming a local folder "s3:".
SCHEMES = ("file", "s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss")
NAME_MAX_BYTES = 255  # the longest file or folder name ext4, XFS, APFS and NTFS allow


@dataclasses.dataclass(frozen=True)
class Location:
    """A results folder on some file system.

    Attributes:
      shown: the folder as the user wrote it (a path made absolute, or the URI, its credentials
        redacted: it is what is printed and recorded).
      filesystem: the pyarrow file system it lives on.
      root: its path on that file system (no trailing slash).
      prefix: what comes before a path in an address ("s3://", "hdfs://host:8020"; "" locally).
      query: the URI's options (endpoint_override=...), repeated in every address.
    """

    shown: str
    filesystem: pafs.FileSystem
    root: str
    prefix: str = ""
    query: str = ""

    @property
    def local(self) -> Path | None:
        """The folder as a local path, None on any other file system."""
        return Path(self.root) if isinstance(self.filesystem, pafs.LocalFileSystem) else None

    def path(self, *parts: str) -> str:
        """The path of `parts` under the root, on the file system."""
        return "/".join((self.root, *parts))

    def address(self, path: str) -> str:
        """The address of a path of this file system, as the user would write it (a URI, or a local path)."""
        return redact(self.prefix + path + (f"?{self.query}" if self.query else ""))

    def write(self, path: str, data: bytes) -> None:
        """Writes a file whole or not at all (see write_with)."""
        self.write_with(path, lambda stream: stream.write(data))

    def write_with(self, path: str, fill: Callable[[BinaryIO], object]) -> None:
        """Writes a file whole or not at all, `fill(stream)` writing its bytes.

        A local file is written beside its place and renamed into it; an object
        store shows an object only once its upload completes, so it is written
        in place, from bytes made first (an upload cut short by an error in
        `fill` would otherwise complete with part of the file).
        """
        parent = path.rsplit("/", 1)[0]
        self.filesystem.create_dir(parent, recursive=True)
        if self.local is None:
            buffer = io.BytesIO()
            fill(buffer)
            with self.filesystem.open_output_stream(path) as stream:
                stream.write(buffer.getbuffer())
            return
        temporary = f"{parent}/.{path.rsplit('/', 1)[1]}.{secrets.token_hex(6)}.tmp"
        # The umask applies (0666 & ~umask), unlike mkstemp's 0600: a teammate's notebook can read a shared folder.
        descriptor = os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        try:
            with os.fdopen(descriptor, "wb") as stream:
                fill(stream)
            os.replace(temporary, path)
        finally:
            if os.path.exists(temporary):
                os.unlink(temporary)

    def files(self, folder: str, suffix: str = "") -> list[str]:
        """The paths of the files under `folder` (recursively) whose names end in `suffix`; [] if none."""
        return [path for path, _, _ in self.listing(folder, suffix)]

    def listing(self, folder: str, suffix: str = "") -> list[tuple[str, int, int]]:
        """(path, size, modification time in ns) of each file `files` names, in its order: what changes
        when one of them is written."""
        selector = pafs.FileSelector(folder, allow_not_found=True, recursive=True)
        return sorted((info.path, info.size, info.mtime_ns or 0) for info in self.filesystem.get_file_info(selector)
                      if info.type == pafs.FileType.File and info.path.endswith(suffix)
                      and not info.base_name.startswith("."))

    def named(self, name: str) -> list[str]:
        """The paths under the root, at any depth, of the files and folders called `name`."""
        selector = pafs.FileSelector(self.root, allow_not_found=True, recursive=True)
        return sorted(info.path for info in self.filesystem.get_file_info(selector) if info.base_name == name)

    def kind(self, path: str) -> pafs.FileType:
        """What is at `path`: FileType.NotFound, File or Directory."""
        return self.filesystem.get_file_info(path).type


def open_location(out: str, field: str = "tracking.out") -> Location:
    """Opens a results folder given as a path or a URI.

    Args:
      out: a local path (relative to the working folder) or a URI.
      field: the config field that names it (for errors).

    Returns:
      The location; nothing is created or written.

    Raises:
      ConfigError: an unknown scheme, or a URI pyarrow cannot open (no
        bucket, no credentials, an unreachable server), in one line.
    """
    scheme = urlparse(out).scheme if "://" in out else ""
    if scheme and scheme not in SCHEMES:
        raise ConfigError(field, out, f"has an unknown scheme {scheme}://: use a local path or a URI of "
                                      f"{', '.join(s + '://' for s in SCHEMES)}")
    if not scheme:
        absolute = os.path.abspath(out)
        longest = max(Path(absolute).parts, key=lambda part: len(part.encode()))
        if len(longest.encode()) > NAME_MAX_BYTES:
            raise ConfigError(field, out, f"has a folder name of {len(longest.encode())} bytes: file systems allow "
                                          f"at most {NAME_MAX_BYTES}")
        return Location(absolute, pafs.LocalFileSystem(), Path(absolute).as_posix())
    parts = urlsplit(out)
    # Results are written into a folder of a bucket; a source to read may be a whole bucket (s3://bucket/*).
    if (field != "source" and not parts.path.strip("/")) or (scheme in ("s3", "gs", "gcs") and not parts.netloc):
        raise ConfigError(field, out, "must name a bucket and a folder in it, e.g. s3://bucket/results/experiment")
    with native_output_held(out) as held:
        try:
            filesystem, root = pafs.FileSystem.from_uri(with_retry_limit(out))
            filesystem.get_file_info(root)  # one request now: an unreachable store fails here, in one line
        except Exception as error:  # pyarrow raises ArrowInvalid, OSError and more
            raise ConfigError(field, out, f"cannot be opened ({first_line(error)}){held.note()}") from None
    root = root.rstrip("/")
    # What precedes the file system's path in an address: s3://bucket/x has the path "bucket/x".
    prefix = f"{scheme}://" if root.startswith(parts.netloc) else f"{scheme}://{parts.netloc}"
    return Location(redact(out), filesystem, root, prefix, parts.query)


def check_writable(location: Location, field: str = "tracking.out") -> None:
    """Refuses, before any work, a results folder that cannot be written.

    A small probe file is written and deleted under the folder (on an object
    store, permissions are known only by trying); a local folder that does
    not exist yet is probed in its nearest existing ancestor, so a refused
    folder is not created.

    Raises:
      ConfigError: naming the folder and what the store said.
    """
    local = location.local
    if local is not None:
        existing = local
        while not existing.exists():
            existing = existing.parent
        if not existing.is_dir():
            raise ConfigError(field, location.shown, f"cannot be created: {existing} is not a folder")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise ConfigError(field, location.shown, f"is not writable ({existing} denies writing)")
        probe_folder = existing.as_posix()
    else:
        probe_folder = location.root
    probe = f"{probe_folder}/.probe-{secrets.token_hex(6)}"
    filesystem = location.filesystem
    try:
        with filesystem.open_output_stream(probe) as stream:
            stream.write(b"")
        filesystem.delete_file(probe)
    except Exception as error:
        raise ConfigError(field, location.shown, f"is not writable ({first_line(error)})") from None
