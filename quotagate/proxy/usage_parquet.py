"""Usage records as Parquet files, written by the proxy itself: flat columns of the usage fields' few
types (usage_fields.py), every one nullable as Arrow writes them, PLAIN values, RLE levels, data
pages v1, GZIP, one row group per flush and partition. Spark, pyarrow and every Parquet reader read
them (tests/unit/test_usage_formats.py reads each documented field back with pyarrow,
tests/pipeline/test_usage_files.py with Spark).

Why not pyarrow: loaded in the proxy, it held 45-60 MB of its RSS (libarrow and libparquet's pages,
its allocator), and its first `pa.array` imported pandas where that is installed (40-50 MB more):
usage records on took the proxy from 60 to 195 MB. What the usage files need of the format is small:
the Thrift compact encoding of the page headers and the footer (parquet.thrift's structs, the fields
set here only), the levels and the values. Nothing here reads Parquet.

The work is split as the recorder runs it: `encode` makes a slice's page bodies on the event loop
(plain Python, a few µs a row); a `ParquetFile` in the worker thread compresses them (zlib, which
releases the GIL), writes them and, at `close`, the footer.
"""

from __future__ import annotations

import os
import struct
import zlib
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import BinaryIO

from quotagate.proxy.usage_fields import BOOL, DOUBLE, INT32, INT64, STRING, STRINGS, UsageField, fields_of

MAGIC = b"PAR1"
CREATED_BY = "quotagate version 1 (build usage records)"  # parquet-mr parses "<app> version <v> (build <b>)"
GZIP_LEVEL = 1  # fast: the rows repeat themselves column by column, so level 1 already packs them well

# parquet.thrift's enums, the values used here
_PHYSICAL = {BOOL: 0, INT32: 1, INT64: 2, DOUBLE: 5, STRING: 6, STRINGS: 6}  # BOOLEAN, INT32, INT64, DOUBLE, BYTE_ARRAY
_OPTIONAL, _REPEATED = 1, 2
_UTF8, _LIST = 0, 3  # ConvertedType
_PLAIN, _RLE = 0, 3  # Encoding
_GZIP = 2  # CompressionCodec
_DATA_PAGE = 0  # PageType
# Thrift compact protocol's types
_TRUE, _I32, _I64, _BINARY, _LIST_TYPE, _STRUCT = 1, 5, 6, 8, 9, 12

assert array("i").itemsize == 4 and array("q").itemsize == 8 and array("d").itemsize == 8


# Thrift compact protocol, what the structs below need -------------------------------------------------------
def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _zigzag(value: int) -> bytes:
    return _varint((value << 1) ^ (value >> 63))


class _Struct:
    """One Thrift struct in the compact protocol, its fields added in increasing id order."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._last = 0

    def _field(self, field_id: int, kind: int) -> None:
        delta = field_id - self._last
        self._parts.append(bytes([delta << 4 | kind]) if 0 < delta <= 15 else bytes([kind]) + _zigzag(field_id))
        self._last = field_id

    def i32(self, field_id: int, value: int) -> _Struct:
        self._field(field_id, _I32)
        self._parts.append(_zigzag(value))
        return self

    def i64(self, field_id: int, value: int) -> _Struct:
        self._field(field_id, _I64)
        self._parts.append(_zigzag(value))
        return self

    def string(self, field_id: int, value: str) -> _Struct:
        self._field(field_id, _BINARY)
        data = value.encode()
        self._parts.append(_varint(len(data)) + data)
        return self

    def struct(self, field_id: int, value: _Struct) -> _Struct:
        self._field(field_id, _STRUCT)
        self._parts.append(value.encoded())
        return self

    def empty_struct(self, field_id: int) -> _Struct:
        return self.struct(field_id, _Struct())

    def list(self, field_id: int, kind: int, items: Sequence[int | str | _Struct]) -> _Struct:
        self._field(field_id, _LIST_TYPE)
        size = len(items)
        self._parts.append(bytes([size << 4 | kind]) if size < 15 else bytes([0xF0 | kind]) + _varint(size))
        for item in items:
            if isinstance(item, _Struct):
                self._parts.append(item.encoded())
            elif isinstance(item, str):
                data = item.encode()
                self._parts.append(_varint(len(data)) + data)
            else:
                self._parts.append(_zigzag(item))
        return self

    def encoded(self) -> bytes:
        return b"".join(self._parts) + b"\x00"


# The schema ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Column:
    """One leaf column: a usage field, or the element of the v1 `topics` list."""

    field: UsageField
    path: tuple[str, ...]
    max_definition: int  # 1: a nullable field; 3: a list's element (the list, its entry, the element)
    max_repetition: int


def schema_elements(fields: Sequence[UsageField]) -> list[_Struct]:
    """FileMetaData.schema: the root, then each field (a list as Parquet's three-level LIST)."""
    elements = [_Struct().string(4, "schema").i32(5, len(fields))]
    for field in fields:
        if field.type == STRINGS:
            elements.append(
                _Struct().i32(3, _OPTIONAL).string(4, field.name).i32(5, 1).i32(6, _LIST)
                .struct(10, _Struct().empty_struct(3))  # LogicalType LIST
            )  # fmt: skip
            elements.append(_Struct().i32(3, _REPEATED).string(4, "list").i32(5, 1))
            elements.append(_element(STRING, "element"))
        else:
            elements.append(_element(field.type, field.name))
    return elements


def _element(kind: str, name: str) -> _Struct:
    element = _Struct().i32(1, _PHYSICAL[kind]).i32(3, _OPTIONAL).string(4, name)
    if kind == STRING:
        element.i32(6, _UTF8).struct(10, _Struct().empty_struct(1))  # LogicalType STRING
    return element


def columns_of(fields: Sequence[UsageField]) -> list[Column]:
    return [
        Column(field, (field.name, "list", "element"), 3, 1)
        if field.type == STRINGS
        else Column(field, (field.name,), 1, 0)
        for field in fields
    ]


# Encoding a slice's pages (on the loop) -----------------------------------------------------------------------
def _levels(levels: Iterable[int]) -> bytes:
    """The RLE/bit-packing hybrid of levels (bit width 1 or 2: one byte a run value), in runs, with the
    4-byte length data pages v1 put before it."""
    out = bytearray()
    for level, run in groupby(levels):
        count = sum(1 for _ in run)
        out += _varint(count << 1)
        out.append(level)
    return len(out).to_bytes(4, "little") + out


def _all_present(count: int) -> bytes:
    run = _varint(count << 1) + b"\x01"
    return len(run).to_bytes(4, "little") + run


def _bits(flags: Iterable[bool], count: int) -> bytes:
    """`count` flags as bits, the first the lowest bit of the first byte (Parquet's bit packing),
    padded to whole bytes."""
    text = "".join(["1" if flag else "0" for flag in flags])[::-1]
    return int(text or "0", 2).to_bytes((count + 7) // 8, "little")


def _presence(values: list) -> bytes:
    """A nullable column's definition levels (bit width 1: 1 present, 0 null) as one bit-packed run,
    padded to groups of 8, with its 4-byte length."""
    count = len(values)
    groups = (count + 7) // 8
    run = _varint(groups << 1 | 1) + _bits((value is not None for value in values), groups * 8)
    return len(run).to_bytes(4, "little") + run


_U32 = struct.Struct("<I").pack


def _plain(kind: str, values: list, memo: dict) -> bytes:
    """PLAIN values (no nulls among them)."""
    if kind == INT64:
        return array("q", values).tobytes()
    if kind == DOUBLE:
        return array("d", values).tobytes()
    if kind == INT32:
        return array("i", values).tobytes()
    if kind == BOOL:
        return _bits(values, len(values))
    parts = []  # STRING: each a 4-byte length and its UTF-8, made once per distinct value of a slice
    for value in values:
        piece = memo.get(value)
        if piece is None:
            data = value.encode("utf-8", "replace")
            piece = memo[value] = _U32(len(data)) + data
        parts.append(piece)
    return b"".join(parts)


@dataclass(frozen=True)
class Page:
    """One column's data page for a slice of rows: its body (levels and values), uncompressed."""

    body: bytes
    values: int  # level entries (rows, or list elements and empty lists)


@dataclass(frozen=True)
class EncodedRows:
    """A slice of rows of one version as one page per column, in the schema's order."""

    version: int
    rows: int
    pages: list[Page]


def encode(version: int, columns: dict[str, list], rows: int) -> EncodedRows:
    """The pages of `rows` rows whose values are `columns` (every field of `version`, by name)."""
    memo: dict[str, bytes] = {}
    pages = []
    for field in fields_of(version):
        values = columns[field.name]
        if field.type == STRINGS:
            pages.append(_list_page(values, memo))
            continue
        if None in values:
            present = [value for value in values if value is not None]
            levels = _presence(values)
        else:
            present, levels = values, _all_present(rows)
        pages.append(Page(levels + _plain(field.type, present, memo), rows))
    return EncodedRows(version, rows, pages)


def _list_page(lists: list, memo: dict) -> Page:
    """A list of strings per row (never null): repetition 0 starts a row, 1 goes on; definition 1 is
    an empty list, 3 an element."""
    repetition: list[int] = []
    definition: list[int] = []
    elements: list[str] = []
    for items in lists:
        if not items:
            repetition.append(0)
            definition.append(1)
            continue
        repetition.append(0)
        repetition.extend([1] * (len(items) - 1))
        definition.extend([3] * len(items))
        elements.extend(items)
    return Page(_levels(repetition) + _levels(definition) + _plain(STRING, elements, memo), len(definition))


# Writing a file (in a worker thread) -----------------------------------------------------------------------
class ParquetFile:
    """A Parquet file being written: `write_row_group` per flush, `close` for the footer."""

    def __init__(self, path: Path, version: int) -> None:
        self.path = path
        self.version = version
        self.fields = fields_of(version)
        self.columns = columns_of(self.fields)
        self.rows = 0
        self._row_groups: list[_Struct] = []
        self._file: BinaryIO = open(path, "wb")  # closed by close or abandon
        self._file.write(MAGIC)
        self._offset = len(MAGIC)
        self.footer = b""

    def write_row_group(self, slices: list[EncodedRows]) -> None:
        """The slices' rows as one row group: per column, one page per slice."""
        rows = sum(part.rows for part in slices)
        chunks = []
        group_bytes = 0
        for index, column in enumerate(self.columns):
            start = self._offset
            values = 0
            uncompressed = 0
            for part in slices:
                page = part.pages[index]
                body = _gzip(page.body)
                header = (
                    _Struct().i32(1, _DATA_PAGE).i32(2, len(page.body)).i32(3, len(body))
                    .struct(5, _Struct().i32(1, page.values).i32(2, _PLAIN).i32(3, _RLE).i32(4, _RLE))
                    .encoded()
                )  # fmt: skip
                self._file.write(header)
                self._file.write(body)
                self._offset += len(header) + len(body)
                values += page.values
                uncompressed += len(header) + len(page.body)
            written = self._offset - start
            group_bytes += uncompressed
            encodings = [_PLAIN, _RLE]
            meta = (
                _Struct().i32(1, _PHYSICAL[column.field.type]).list(2, _I32, encodings)
                .list(3, _BINARY, list(column.path)).i32(4, _GZIP).i64(5, values).i64(6, uncompressed)
                .i64(7, written).i64(9, start)
            )  # fmt: skip
            chunks.append(_Struct().i64(2, start).struct(3, meta))
        self._row_groups.append(_Struct().list(1, _STRUCT, chunks).i64(2, group_bytes).i64(3, rows))
        self.rows += rows

    @property
    def size(self) -> int:
        return self._offset

    def close(self) -> None:
        """Writes the footer (FileMetaData, its length, the magic) and closes the file; `footer` is
        what its last bytes must be."""
        meta = (
            _Struct().i32(1, 1).list(2, _STRUCT, schema_elements(self.fields)).i64(3, self.rows)
            .list(4, _STRUCT, self._row_groups).string(6, CREATED_BY)
            .encoded()
        )  # fmt: skip
        self.footer = meta + len(meta).to_bytes(4, "little") + MAGIC
        self._file.write(self.footer)
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()

    def abandon(self) -> None:
        self._file.close()


def _gzip(body: bytes) -> bytes:
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)  # 31: the gzip format Parquet's GZIP means
    return compressor.compress(body) + compressor.flush()


def footer_matches(path: Path, footer: bytes) -> bool:
    """Whether the file at `path` ends with `footer` (read back from the disk)."""
    with open(path, "rb") as file:
        file.seek(0, os.SEEK_END)
        if file.tell() < len(footer) + len(MAGIC):
            return False
        file.seek(-len(footer), os.SEEK_END)
        return file.read() == footer
