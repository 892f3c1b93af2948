"""A walk over any Kafka request, driven by its schema, within Kafka's own limits: what the proxy
reads of a request it must decode before admitting it (the quota admin APIs, topic mutations)
costs a few nanoseconds of C per field, and a request that breaks a limit is refused before
kafka-python builds one object of it.

- `Program` is a message version's schema (kafka-python's classes carry Kafka's JSON) compiled into
  a flat array of ops, five ints each: (op, nullable, argument, argument, field). Made once per
  (message, version) by `program`.
- `Walk` runs a program over one frame: every string and array is checked as Kafka's generated
  readers check them (protocol/limits.py), and the array elements are counted up to a limit the
  caller gives. A break raises FrameError naming the field: the broker closes the connection on a
  request it cannot parse, and so does the proxy.
- `Walk.echo` answers every element of an array from the bytes of one of its fields, without
  decoding: AlterClientQuotas refused to a principal that may not alter is answered entry by entry
  with the entity the client sent, as the broker answers it, at C speed whatever the entry count.

Compiled as wire_walk_c (typed by wire_walk_c.pxd), interpreted as it is: quotagate/compiled.py.
The varint and tagged-field readers are produce_walk's, with its limits.
"""

from array import array

from quotagate.protocol import buffers
from quotagate.protocol.framing import FrameError
from quotagate.protocol.limits import (
    DECODED_ELEMENTS_KEY,
    MAX_ARRAY_ELEMENTS,
    MAX_STRING_BYTES,
    NO_LIMIT,
    array_problem,
    string_problem,
)

# Compiled, these are cimported (wire_walk_c.pxd): C calls, not the Python names imported here.
from quotagate.protocol.produce_walk import _skip_tags, _uvarint, i32

# Ops: what a field is, and so how it is skipped.
OP_FIXED = 1  # argument: its size in bytes
OP_STRING = 2
OP_BYTES = 3
OP_ARRAY_FIXED = 4  # argument: an element's size in bytes
OP_ARRAY_STRING = 5
OP_ARRAY_STRUCT = 6  # arguments: the element's ops, [start, stop)
OP_STRUCT = 7  # arguments: its ops, [start, stop)
STRIDE = 5
MAX_STRING = MAX_STRING_BYTES
MAX_ARRAY = MAX_ARRAY_ELEMENTS

_FIXED_SIZES = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "bitfield": 4,  # kafka-python's name for authorized operations (int32)
    "int64": 8,
    "float64": 8,
    "uuid": 16,
}


class ElementsOverLimit(FrameError):
    """A request holds more array elements than its caller may decode (a limit of the proxy's, not
    Kafka's: the message names the key that sets it)."""

    reason = DECODED_ELEMENTS_KEY


def _in_versions(spec, version):
    """Whether `version` is in a schema's version range ("3+", "0-5", "none")."""
    if spec is None or spec == "none":
        return False
    if spec.endswith("+"):
        return version >= int(spec[: len(spec) - 1])
    low, _, high = spec.partition("-")
    return int(low) <= version <= int(high or low)


class Program:
    """A message version's fields as ops (see the module's docstring). `ops_at[path]` is the op of
    a field by its dotted path ("Entries.Entity"); the message's own fields are ops [0, top)."""

    def __init__(self, name, version, schema):
        self.name = name
        self.version = version
        self.flexible = _in_versions(schema.get("flexibleVersions"), version)
        self.names = []  # field paths, for errors
        self.ops_at = {}
        self._structs = {s["name"]: s["fields"] for s in schema.get("commonStructs") or ()}
        ops = []
        self.top = self._compile(schema["fields"], "", ops)
        self.ops = array("i", ops)

    def _compile(self, fields, prefix, ops):
        """Appends the ops of `fields` (then of their structs, after them); returns where they end."""
        present = [f for f in fields if _in_versions(f.get("versions"), self.version) and not _tagged(f, self.version)]
        start = len(ops)
        ops.extend([0] * (STRIDE * len(present)))  # this struct's ops are contiguous; nested ones follow
        for index, field in enumerate(present):
            at = start + STRIDE * index
            path = prefix + field["name"]
            self.ops_at[path] = at
            kind = field["type"]
            nullable = 1 if _in_versions(field.get("nullableVersions"), self.version) else 0
            self.names.append(path)
            name_index = len(self.names) - 1
            element = kind[2:] if kind.startswith("[]") else None
            if element is None and kind in _FIXED_SIZES:
                op = (OP_FIXED, 0, _FIXED_SIZES[kind], 0)
            elif element is None and kind == "string":
                op = (OP_STRING, nullable, 0, 0)
            elif element is None and kind in ("bytes", "records"):
                op = (OP_BYTES, nullable, 0, 0)
            elif element in _FIXED_SIZES:
                op = (OP_ARRAY_FIXED, nullable, _FIXED_SIZES[element], 0)
            elif element == "string":
                op = (OP_ARRAY_STRING, nullable, 0, 0)
            else:
                sub_fields = field.get("fields") or self._structs[element or kind]
                sub_start = len(ops)
                sub_stop = self._compile(sub_fields, path + ".", ops)
                op = (OP_ARRAY_STRUCT if element is not None else OP_STRUCT, nullable, sub_start, sub_stop)
            ops[at : at + STRIDE] = [op[0], op[1], op[2], op[3], name_index]
        return start + STRIDE * len(present)

    def following(self, at):
        """The op of the field after the field of op `at`, in the same struct."""
        return at + STRIDE


def _tagged(field, version):
    return _in_versions(field.get("taggedVersions"), version)


_PROGRAMS = {}


def program(cls, version):
    """The Program of kafka-python message class `cls` at `version` (made once)."""
    return schema_program(cls.__name__, cls._json, version)


def schema_program(name, schema, version):
    """The Program of the message `name` whose schema (Kafka's JSON, as a dict) is `schema`, at
    `version` (made once per name and version)."""
    key = (name, version)
    made = _PROGRAMS.get(key)
    if made is None:
        made = _PROGRAMS[key] = Program(name, version, schema)
    return made


class Walk:
    """One walk of a Program over one frame (bytes or a memoryview). `elements` counts the array
    elements walked; past `max_elements` (-1: no limit) ElementsOverLimit is raised with `limit_key`
    in its message."""

    def __init__(self, prog, frame, max_elements=NO_LIMIT, limit_key=""):
        self.program = prog
        self.flexible = prog.flexible
        self.frame = frame
        self.end = len(frame)
        self.elements = 0
        self.max_elements = max_elements
        self.limit_key = limit_key
        self._ops = prog.ops  # kept: _op points into it
        self._op = buffers.ints(self._ops)
        self._buf = buffers.chars(frame)  # frame is kept: _buf points into it

    def message(self, pos):
        """Walks the whole message from its body at `pos`; returns where it ends."""
        return self.struct(pos, 0, self.program.top)

    def after(self, pos, at):
        """The message's own fields after op `at` (from `pos`), then its tagged fields: where it ends."""
        return self.struct(pos, at + STRIDE, self.program.top)

    def first_elements(self, pos, array_at, keep):
        """The array of op `array_at` at `pos`, walked whole: (its count, where its first element
        starts, where its first `keep` elements end, where it ends)."""
        ops = self._op
        count, pos = self.count(pos, array_at)
        first = pos
        kept_end = pos
        for index in range(count):
            pos = self.struct(pos, ops[array_at + 2], ops[array_at + 3])
            if index < keep:
                kept_end = pos
        return count, first, kept_end, pos

    def struct(self, pos, start, stop):
        """The fields of ops [start, stop), then (flexible) the struct's tagged fields."""
        pos = self.fields(pos, start, stop)
        if self.flexible:
            pos = self.tags(pos)
        return pos

    def fields(self, pos, start, stop):
        at = start
        while at < stop:
            pos = self.field(pos, at)
            at += STRIDE
        return pos

    def field(self, pos, at):
        """Walks the field of op `at` from `pos`; returns where it ends."""
        ops = self._op
        op = ops[at]
        if op == OP_FIXED:
            pos += ops[at + 2]
            if pos > self.end:
                self._truncated(at)
            return pos
        if op == OP_STRING or op == OP_BYTES:
            length, pos = self._length(pos, at)
            if length < 0:
                return pos
            if op == OP_STRING and length > MAX_STRING:
                raise FrameError(self._where() + string_problem(self._name(at), length))
            pos += length
            if pos > self.end:
                self._truncated(at)
            return pos
        count, pos = self.count(pos, at)
        if op == OP_ARRAY_FIXED:
            pos += count * ops[at + 2]
            if pos > self.end:
                self._truncated(at)
        elif op == OP_ARRAY_STRING:
            for _i in range(count):
                pos = self.string_element(pos, at)
        elif op == OP_ARRAY_STRUCT:
            for _i in range(count):
                pos = self.struct(pos, ops[at + 2], ops[at + 3])
        else:  # OP_STRUCT: not an array; count() read nothing for it
            pos = self.struct(pos, ops[at + 2], ops[at + 3])
        return pos

    def int16(self, pos, at):
        """The int16 of op `at`'s field at `pos`, which must lie within the frame."""
        if pos + 2 > self.end:
            self._truncated(at)
        value = (self._buf[pos] << 8) | self._buf[pos + 1]
        return value - 0x10000 if value >= 0x8000 else value

    def int32(self, pos, at):
        """The int32 of op `at`'s field at `pos`, which must lie within the frame."""
        if pos + 4 > self.end:
            self._truncated(at)
        return i32(self._buf, pos)

    def string_element(self, pos, at):
        """Walks one element of the array of strings of op `at` from `pos`; returns where it ends."""
        length, pos = self._length(pos, at)
        if length > MAX_STRING:
            raise FrameError(self._where() + string_problem(self._name(at), length))
        if length > 0:
            pos += length
        if pos > self.end:
            self._truncated(at)
        return pos

    def count(self, pos, at):
        """An array's element count (0 for null, which a nullable array may be), checked against
        Kafka's limits and counted in `elements`: (count, position after it). For OP_STRUCT, (1, pos)."""
        ops = self._op
        if ops[at] == OP_STRUCT:
            return 1, pos
        if self.flexible:
            value, pos = _uvarint(self._buf, pos, self.end)
            if value < 0:
                self._truncated(at)
            count = value - 1
        else:
            if pos + 4 > self.end:
                self._truncated(at)
            count = i32(self._buf, pos)
            pos += 4
        if count < 0:
            if not ops[at + 1]:
                raise FrameError(f"{self._where()}non-nullable field {self._name(at)} was serialized as null")
            return 0, pos
        if count > MAX_ARRAY or count > self.end - pos:
            raise FrameError(self._where() + array_problem(self._name(at), count, self.end - pos))
        self.elements += count
        if self.max_elements >= 0 and self.elements > self.max_elements:
            raise ElementsOverLimit(
                f"{self._where()}more than {self.max_elements} array elements (at {self._name(at)}): "
                f"over {self.limit_key}"
            )
        return count, pos

    def tags(self, pos):
        """Skips a tagged-field section (produce_walk's reader: by length, at most MAX_TAGGED_FIELDS)."""
        after = _skip_tags(self._buf, pos, self.end)
        if after > self.end:
            raise FrameError(f"{self._where()}malformed tagged fields (or more than the proxy reads)")
        return after

    def echo(self, pos, array_at, field_at, prefix, suffix):
        """For each element of the array of op `array_at` (a struct array) from `pos`: `prefix`, the
        bytes of its field of op `field_at` as sent, `suffix`. Returns (the elements made, as a
        bytearray; how many; where the array ends). Each element is walked whole and checked, once;
        nothing is decoded."""
        ops = self._op
        start, stop = ops[array_at + 2], ops[array_at + 3]
        count, pos = self.count(pos, array_at)
        spans = array("q", bytes(16 * count))  # each element's field: start, end
        size = 0
        for index in range(count):
            at = start
            while at < stop:
                if at == field_at:
                    spans[2 * index] = pos
                pos = self.field(pos, at)
                if at == field_at:
                    spans[2 * index + 1] = pos
                at += STRIDE
            if self.flexible:
                pos = self.tags(pos)
            size += len(prefix) + spans[2 * index + 1] - spans[2 * index] + len(suffix)
        out = bytearray(size)
        out_buf = out
        prefix_buf = prefix
        suffix_buf = suffix
        written = 0
        for index in range(count):
            written = _put(out_buf, written, prefix_buf, 0, len(prefix))
            written = _put(out_buf, written, self._buf, spans[2 * index], spans[2 * index + 1])
            written = _put(out_buf, written, suffix_buf, 0, len(suffix))
        return out, count, pos

    def _length(self, pos, at):
        """A string's or bytes' length (-1: null, where nullable), and the position after it."""
        if self.flexible:
            value, pos = _uvarint(self._buf, pos, self.end)
            if value < 0:
                self._truncated(at)
            length = value - 1
        elif self._op[at] == OP_STRING or self._op[at] == OP_ARRAY_STRING:
            if pos + 2 > self.end:
                self._truncated(at)
            length = (self._buf[pos] << 8) | self._buf[pos + 1]
            if length >= 0x8000:
                length -= 0x10000
            pos += 2
        else:
            if pos + 4 > self.end:
                self._truncated(at)
            length = i32(self._buf, pos)
            pos += 4
        if length < 0 and not self._op[at + 1]:
            raise FrameError(f"{self._where()}non-nullable field {self._name(at)} was serialized as null")
        return length, pos

    def _name(self, at):
        return self.program.names[self._op[at + 4]]

    def _where(self):
        return f"{self.program.name} v{self.program.version}: "

    def _truncated(self, at):
        raise FrameError(f"{self._where()}truncated at {self._name(at)}")


def check(cls, version, frame, body, max_elements=NO_LIMIT, limit_key=""):
    """Walks a whole request of kafka-python class `cls` (its body at `body`) as Kafka's readers
    would parse it, before anything decodes it: FrameError (ElementsOverLimit past `max_elements`)
    if they would refuse it. Returns its array elements."""
    walk = Walk(program(cls, version), frame, max_elements, limit_key)
    walk.message(body)
    return walk.elements


def metadata_topics(prog, frame, pos):
    """The topics of a Metadata response (`prog`: MetadataResponse's Program at its version) from
    its topic array at `pos`: (name, topic id or None, partition count) of each topic answered
    without error, as bytes, and where the array ends. A client sizes this array (it may name 50 000
    topics): it is walked here, in C, and never decoded."""
    walk = Walk(prog, frame)
    ops = walk._op
    ops_at = prog.ops_at
    topics_at = ops_at["Topics"]
    error_at = ops_at["Topics.ErrorCode"]
    name_at = ops_at["Topics.Name"]
    id_at = ops_at.get("Topics.TopicId", -1)
    partitions_at = ops_at["Topics.Partitions"]
    start, stop = ops[topics_at + 2], ops[topics_at + 3]
    count, pos = walk.count(pos, topics_at)
    found = []
    for _t in range(count):
        error = 1
        name_start = name_end = id_start = 0
        partitions = 0
        at = start
        while at < stop:
            if at == error_at:
                error = walk.int16(pos, at)
            elif at == name_at:
                name_start = pos
            elif at == id_at:
                id_start = pos
            if at == partitions_at:
                partitions, pos = walk.count(pos, at)
                for _p in range(partitions):
                    pos = walk.struct(pos, ops[at + 2], ops[at + 3])
            else:
                pos = walk.field(pos, at)
            if at == name_at:
                name_end = pos
            at += STRIDE
        if walk.flexible:
            pos = walk.tags(pos)
        if error == 0:
            length, name_pos = walk._length(name_start, name_at)
            if length > 0:
                topic_id = bytes(frame[id_start : id_start + 16]) if id_at >= 0 else None
                found.append((bytes(frame[name_pos:name_end]), topic_id, partitions))
    return found, pos


def _put(out, at, source, start, stop):
    """Copies source[start:stop] into out at `at`; returns where the copy ends."""
    n = stop - start
    if n > 0:
        buffers.copy(out, at, source, start, stop)
    return at + n
