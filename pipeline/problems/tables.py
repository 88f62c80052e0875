"""Tables of records read in place: Parquet, CSV or NumPy `.npz`, from a local
path or any URI that `pyarrow.fs` (or fsspec) understands, a row range at a time
(shared/DESIGN.md §2, "Data sets").

Columns are one-dimensional: a Parquet or CSV column, or in an `.npz` a 1-D
array `name`, or a 2-D array `name` of shape (rows, k) seen as k columns
`name[0]` … `name[k−1]`.
"""
from __future__ import annotations

import fnmatch
import functools
import hashlib
import os
import re
import struct
import zipfile
from typing import Iterator

import numpy as np

from pipeline.uris import first_line, native_output_held, with_retry_limit

FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".npz": "npz"}
HASH_CHUNK = 8 << 20  # bytes per read while fingerprinting
SCAN_ROWS = 1 << 16  # rows per batch of a validation scan
# The largest compressed .npz member read: zip's deflate has no random access, so every reader
# decompresses a member whole (a 2.8 MB file of 2·10⁷ × 3 took 1.67 GiB per run).
COMPRESSED_NPZ_MAX = 256 << 20
NO_MORE = object()  # what a read_keyed `place` returns when no later piece holds a row it wants


class TableError(ValueError):
    """A table that cannot be opened or read as asked; the message is the rule it breaks."""


def _csv_error(error: BaseException) -> TableError:
    """A CSV reading error without the row or the value it quotes: a table's contents (or a
    file a source names by mistake, /etc/passwd) never reach an error line."""
    lines = str(error).strip().splitlines()
    text = re.sub(r"(Expected \d+ columns?, got \d+).*", r"\1", lines[0] if lines else type(error).__name__)
    return TableError(f"is not a readable CSV file: {re.sub(chr(39) + '[^' + chr(39) + ']*' + chr(39), '…', text)}")


class _CsvBatches:
    """A streaming CSV reader's batches; a bad row in any block (not only the first, which
    opening parses) is a TableError."""

    def __init__(self, reader):
        self.reader, self.schema = reader, reader.schema

    def __iter__(self):
        while True:
            try:
                batch = self.reader.read_next_batch()
            except StopIteration:
                return
            except Exception as error:
                raise _csv_error(error) from None
            yield batch


def _filesystem(source: str):
    """(pyarrow filesystem, path) of a local path or URI; fsspec for schemes pyarrow lacks."""
    from pyarrow import fs

    if "://" not in source:
        return fs.LocalFileSystem(), os.path.abspath(source)
    with native_output_held(source) as held:
        try:
            return fs.FileSystem.from_uri(with_retry_limit(source))
        except Exception as arrow_error:  # a scheme pyarrow has no native support for, e.g. gcsfs-only setups
            try:
                import fsspec

                filesystem, path = fsspec.core.url_to_fs(source)
            except Exception:
                raise TableError(f"cannot be opened: {first_line(arrow_error)}{held.note()}") from None
            return fs.PyFileSystem(fs.FSSpecHandler(filesystem)), path


def _npy_header(stream) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, Fortran order, dtype) of the .npy array that starts at the stream's position."""
    version = np.lib.format.read_magic(stream)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    return read(stream)


def format_of(source: str) -> str:
    """The table format named by a source's suffix.

    Raises:
      TableError: an unknown suffix.
    """
    suffix = os.path.splitext(source.split("?")[0])[1].lower()
    if suffix not in FORMATS:
        raise TableError(f"must end in one of {', '.join(FORMATS)} (the format is read from the suffix)")
    return FORMATS[suffix]


class Table:
    """One table, opened lazily, read by row ranges.

    Args:
      source: a local path or a URI (s3://, gs://, hdfs://, file://, …).

    Raises:
      TableError: an unknown format, a missing file or an unreadable one.
    """

    def __init__(self, source: str):
        self.source = source
        self.format = format_of(source)
        self.filesystem, self.path = _filesystem(source)
        from pyarrow import fs

        try:
            info = self.filesystem.get_file_info(self.path)
        except OSError as error:  # an unreachable store: its first line (a cloud SDK's status runs on)
            line = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise TableError(f"cannot be reached: {line[:300]}" + ("…" if len(line) > 300 else "")) from None
        if info.type != fs.FileType.File:
            raise TableError("no such file")
        self.size, self.mtime = info.size, info.mtime_ns
        self._arrays: dict[str, np.ndarray] = {}  # .npz members read: they die with this table

    # --- what the table holds ---------------------------------------------------------

    @functools.cached_property
    def _parquet(self):
        import pyarrow.parquet as pq

        try:
            return pq.ParquetFile(self.filesystem.open_input_file(self.path))
        except Exception as error:
            raise TableError(f"is not a readable Parquet file: {error}") from None

    @functools.cached_property
    def _npz(self) -> dict[str, tuple[int, int | None]]:
        """name → (rows, width or None for 1-D) of each array in an .npz."""
        arrays = {}
        try:
            with self.filesystem.open_input_file(self.path) as handle, zipfile.ZipFile(handle) as archive:
                for member in archive.namelist():
                    if not member.endswith(".npy"):
                        continue
                    with archive.open(member) as stream:
                        shape, _, dtype = _npy_header(stream)
                    if len(shape) not in (1, 2) or dtype.kind not in "biuf":
                        continue  # not a column or a block of numeric columns
                    arrays[member[:-4]] = (shape[0], shape[1] if len(shape) == 2 else None)
        except (zipfile.BadZipFile, ValueError, EOFError) as error:  # not a zip, or a member that is no .npy
            raise TableError(f"is not a readable .npz file: {error}") from None
        return arrays

    @functools.cached_property
    def columns(self) -> dict[str, bool]:
        """Column name → whether it holds numbers (booleans, integers, floats), in file order."""
        import pyarrow as pa

        def numeric(kind) -> bool:
            return pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)

        if self.format == "parquet":
            return {field.name: numeric(field.type) for field in self._parquet.schema_arrow}
        if self.format == "csv":
            reader = self._csv_reader(None)
            return {field.name: numeric(field.type) for field in reader.schema}
        names = {}
        for name, (_, width) in self._npz.items():
            names.update({name: True} if width is None else {f"{name}[{i}]": True for i in range(width)})
        return names

    @functools.cached_property
    def num_rows(self) -> int:
        """How many rows (a CSV is counted by one streaming pass)."""
        if self.format == "parquet":
            return self._parquet.metadata.num_rows
        if self.format == "npz":
            counts = {rows for rows, _ in self._npz.values()}
            if len(counts) > 1:
                raise TableError(f"holds arrays of different lengths {sorted(counts)}: every array must have one entry per row")
            return counts.pop() if counts else 0
        return sum(batch.num_rows for batch in self._csv_reader([next(iter(self.columns))]))

    def match(self, pattern: str, exclude: tuple[str | None, ...]) -> list[str]:
        """The columns a comma-separated list of names or glob patterns names, in file order.

        Args:
          pattern: e.g. "x*", "age,income" or "*".
          exclude: columns never matched (the label, the user column).

        Returns:
          The matched column names.
        """
        wanted = [part.strip() for part in pattern.split(",") if part.strip()]
        # A part equal to a column's name names it (an .npz column `X[0]` is no glob class).
        return [name for name in self.columns
                if name not in exclude and any(name == part or fnmatch.fnmatchcase(name, part) for part in wanted)]

    def fingerprint(self) -> str:
        """The SHA-256 of the table's bytes: what cached results (the optimum) are keyed by."""
        digest = hashlib.sha256()
        with self.filesystem.open_input_stream(self.path) as stream:
            while chunk := stream.read(HASH_CHUNK):
                digest.update(chunk)
        return digest.hexdigest()

    # --- reading ------------------------------------------------------------------------

    def _csv_reader(self, columns: list[str] | None) -> "_CsvBatches":
        from pyarrow import csv

        include = {} if columns is None else {"include_columns": columns}
        try:
            return _CsvBatches(csv.open_csv(self.filesystem.open_input_stream(self.path),
                                            convert_options=csv.ConvertOptions(**include)))
        except Exception as error:
            raise _csv_error(error) from None

    def _into(self, out: np.ndarray, at: int, table, columns: list[str]) -> None:
        """Copies an Arrow table's or record batch's columns into out[:, at:at + rows] as float64."""
        for index, name in enumerate(columns):
            column = table.column(name)
            if column.null_count:
                raise TableError(f"column {name!r} has missing values")
            out[index, at: at + table.num_rows] = column.to_numpy()

    def read(self, columns: list[str], first: int, stop: int, rows: np.ndarray | None = None) -> np.ndarray:
        """Rows [first, stop) of some columns, or the rows `rows` (sorted, within [first, stop)).

        Reads only what holds them: the Parquet row groups that overlap the range,
        one column chunk at a time; the .npz members memory-mapped when stored
        uncompressed on a local disk; a CSV streamed up to `stop`.

        Args:
          columns: the column names.
          first, stop: the row range.
          rows: sorted row indices to keep, or None for every row of the range.

        Returns:
          float64 array of shape (len(columns), rows).
        """
        if rows is not None and rows.size == 0:
            return np.empty((len(columns), 0))
        count = stop - first
        if self.format != "csv" and stop > self.num_rows:  # never a buffer left part uninitialised
            raise TableError(f"has {self.num_rows} rows, fewer than the {stop} this read needs")
        out = np.empty((len(columns), count if rows is None else rows.size))
        keep = None if rows is None else rows - first  # positions within the range
        if self.format == "npz":
            for index, name in enumerate(columns):
                values = self._npz_column(name)[first:stop]
                out[index] = values if keep is None else values[keep]
            return out
        if self.format == "parquet":
            self._read_parquet(out, columns, first, stop, keep)
            return out
        # A CSV streams in batches, each (table, first row it holds): cut to the range, the rows kept.
        at = 0
        for table, start in self._csv_pieces(columns, first, stop):
            low, high = max(first, start), min(stop, start + table.num_rows)
            if high <= low:
                continue
            piece = table.slice(low - start, high - low)
            if keep is not None:
                piece = piece.take(keep[(keep >= low - first) & (keep < high - first)] - (low - first))
            self._into(out, at, piece, columns)
            at += piece.num_rows
        if at != out.shape[1]:
            raise TableError(f"ended after {at} of the {out.shape[1]} rows this read needs")
        return out

    def _read_parquet(self, out: np.ndarray, columns: list[str], first: int, stop: int,
                      keep: np.ndarray | None) -> None:
        """Fills out from the row groups that overlap [first, stop), one column chunk at a
        time: a shard holds its rows plus one column of one row group, never a whole group."""
        metadata = self._parquet.metadata
        start, at = 0, 0
        for group in range(metadata.num_row_groups):
            rows = metadata.row_group(group).num_rows
            low, high = max(first, start), min(stop, start + rows)
            if low < high:
                # Positions within the group of the rows kept (all of [low, high), or the sampled ones).
                chosen = slice(low - start, high - start) if keep is None else \
                    keep[(keep >= low - first) & (keep < high - first)] + (first - start)
                count = high - low if keep is None else chosen.size
                for index, name in enumerate(columns):
                    column = self._parquet.read_row_group(group, columns=[name]).column(0)
                    if column.null_count:
                        raise TableError(f"column {name!r} has missing values")
                    out[index, at: at + count] = column.to_numpy()[chosen]
                at += count
            start += rows
            if start >= stop:
                break

    def _csv_pieces(self, columns: list[str], first: int, stop: int) -> Iterator:
        start = 0
        for batch in self._csv_reader(columns):
            yield batch, start
            start += batch.num_rows
            if start >= stop:
                break

    def _npz_array(self, name: str) -> np.ndarray:
        """An .npz member, memory-mapped where it is stored uncompressed on a local disk; read once
        per Table (a compressed one whole, so at most COMPRESSED_NPZ_MAX bytes of it).

        Raises:
          TableError: a compressed member above COMPRESSED_NPZ_MAX.
        """
        if name not in self._arrays:
            try:
                self._arrays[name] = self._read_npz_array(name)
            except TableError:
                raise
            except Exception as error:  # a header that promises more than the member holds, a damaged member
                raise TableError(f"member {name}.npy does not hold what its header says "
                                 f"({type(error).__name__}: {str(error).strip()[:200]})") from None
        return self._arrays[name]

    def _read_npz_array(self, name: str) -> np.ndarray:
        member = f"{name}.npy"
        from pyarrow import fs

        if isinstance(self.filesystem, fs.LocalFileSystem):
            with zipfile.ZipFile(self.path) as archive:
                info = archive.getinfo(member)
            if info.compress_type == zipfile.ZIP_STORED:
                with open(self.path, "rb") as handle:
                    handle.seek(info.header_offset)
                    header = handle.read(30)  # the local file header: its name and extra field lengths
                    name_length, extra_length = struct.unpack("<HH", header[26:30])
                    handle.seek(info.header_offset + 30 + name_length + extra_length)
                    shape, fortran, dtype = _npy_header(handle)
                    offset = handle.tell()
                return np.memmap(self.path, dtype=dtype, mode="r", offset=offset, shape=shape,
                                 order="F" if fortran else "C")
        with self.filesystem.open_input_file(self.path) as handle, zipfile.ZipFile(handle) as archive:
            info = archive.getinfo(member)
            if info.compress_type != zipfile.ZIP_STORED and info.file_size > COMPRESSED_NPZ_MAX:
                raise TableError(f"member {member} is compressed, {info.file_size / 2**20:.0f} MiB uncompressed, above "
                                 f"{COMPRESSED_NPZ_MAX >> 20} MiB: every reader would decompress it whole; write it "
                                 "with numpy.savez (uncompressed, memory-mapped) or as Parquet")
            with archive.open(member) as stream:
                return np.lib.format.read_array(stream)

    def _npz_column(self, name: str) -> np.ndarray:
        if name.endswith("]") and "[" in name:
            array, index = name[:-1].split("[")
            return self._npz_array(array)[:, int(index)]
        return self._npz_array(name)

    def _keys_of(self, name: str, column):
        """A piece of a user column as numpy integers, or a pyarrow array of strings.

        Raises:
          TableError: missing values, or values that are neither integers nor strings.
        """
        import pyarrow as pa

        if isinstance(column, np.ndarray):  # an .npz member
            if column.dtype.kind not in "iu":
                raise TableError(f"column {name!r} holds {column.dtype} values: a user column holds integers or strings")
            return column
        if column.null_count:
            raise TableError(f"column {name!r} has missing values: every record must name its user")
        kind = column.type
        if pa.types.is_integer(kind):
            return column.to_numpy()
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            raise TableError(f"column {name!r} holds {kind} values: a user column holds integers or strings")
        return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column

    def _pieces(self, columns: list[str], name: str, first: int, stop: int) -> Iterator:
        """The rows [first, stop) a piece at a time (Parquet row groups, CSV batches, .npz slices of
        SCAN_ROWS): (first row of the piece, its user column's values, a function returning the
        piece's float64 columns one at a time)."""
        if self.format == "npz":
            if name not in self._npz or self._npz[name][1] is not None:
                raise TableError(f"has no 1-D array {name!r}")
            keys = self._npz_array(name)
            for low in range(first, stop, SCAN_ROWS):
                high = min(low + SCAN_ROWS, stop)
                yield low, self._keys_of(name, np.asarray(keys[low:high])), \
                    lambda low=low, high=high: (self._npz_column(column)[low:high] for column in columns)
            return
        if name not in self.columns:
            raise TableError(f"has no column {name!r}")

        def values(table, column: str, low: int, high: int) -> np.ndarray:
            values = table.column(column)
            if values.null_count:
                raise TableError(f"column {column!r} has missing values")
            return values.slice(low, high - low).to_numpy()

        if self.format == "parquet":
            metadata, start = self._parquet.metadata, 0
            for group in range(metadata.num_row_groups):
                rows = metadata.row_group(group).num_rows
                low, high = max(first, start), min(stop, start + rows)
                if low < high:
                    # One column at a time, on this thread: a thread pool gains nothing on one column chunk.
                    keys = self._parquet.read_row_group(group, columns=[name], use_threads=False).column(0)
                    yield low, self._keys_of(name, keys.slice(low - start, high - low)), \
                        lambda group=group, low=low - start, high=high - start: (
                            values(self._parquet.read_row_group(group, columns=[column], use_threads=False),
                                   column, low, high)
                            for column in columns)
                start += rows
                if start >= stop:
                    return
            return
        for table, start in self._csv_pieces(list(dict.fromkeys([*columns, name])), first, stop):
            low, high = max(first, start), min(stop, start + table.num_rows)
            if low < high:
                yield low, self._keys_of(name, table.column(name).slice(low - start, high - low)), \
                    lambda table=table, low=low - start, high=high - start: (
                        values(table, column, low, high) for column in columns)

    def key_pieces(self, name: str) -> Iterator[tuple[int, object]]:
        """Every value of one column of integers or strings (a user column), a piece at a time, in
        row order: (first row of the piece, its values: numpy integers, or a pyarrow array of strings).

        Raises:
          TableError: no such column, missing values, or values that are neither integers nor strings.
        """
        for start, keys, _ in self._pieces([], name, 0, self.num_rows if self.format != "csv" else 1 << 62):
            yield start, keys

    def read_keyed(self, columns: list[str], name: str, place, out: np.ndarray, first: int = 0,
                   stop: int | None = None) -> None:
        """Reads the rows that `place` picks by their user column into columns of out, a piece of
        rows at a time (a Parquet row group, a CSV batch, an .npz slice), one column at a time:
        memory holds out, one piece's user column and one piece's column, never a whole group.

        Args:
          columns: the column names (out's rows, in order).
          name: the user column.
          place: place(first row of the piece, its user column's values) -> (kept, to), the
            positions within the piece of the rows kept and the columns of out they go to (index
            arrays, or slices), or None when the piece holds none, or NO_MORE when neither it nor
            any later piece holds one.
          out: float64 array (len(columns), records).
          first, stop: the rows to look at (stop None: to the end).

        Raises:
          TableError: no such column, missing values, or user values that are neither integers nor strings.
        """
        stop = (self.num_rows if self.format != "csv" else 1 << 62) if stop is None else stop
        for start, keys, load in self._pieces(columns, name, first, stop):
            placed = place(start, keys)
            if placed is NO_MORE:
                return
            if placed is None:
                continue
            kept, to = placed
            gathered = None if isinstance(kept, slice) else np.empty(kept.size)
            for index, values in enumerate(load()):
                row = out[index]  # a 1-D view: its fancy assignment is faster than out[index, to]'s
                row[to] = values[kept] if gathered is None or values.dtype != gathered.dtype else \
                    np.take(values, kept, out=gathered)

    def scan(self, columns: list[str]) -> Iterator[np.ndarray]:
        """Every row of some columns, a batch at a time (for checks that must see every value).

        Yields:
          float64 arrays of shape (len(columns), rows in the batch).
        """
        total = self.num_rows
        if self.format == "npz":
            for first in range(0, total, SCAN_ROWS):
                yield self.read(columns, first, min(first + SCAN_ROWS, total))
            return
        batches = (self._parquet.iter_batches(batch_size=SCAN_ROWS, columns=columns)
                   if self.format == "parquet" else self._csv_reader(columns))
        for batch in batches:
            out = np.empty((len(columns), batch.num_rows))
            self._into(out, 0, batch, columns)
            yield out

    def __getstate__(self):  # open files do not travel; reopened where used
        return {"source": self.source}

    def __setstate__(self, state):
        self.__init__(state["source"])
