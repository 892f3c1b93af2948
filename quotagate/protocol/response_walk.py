"""The responses the proxy changes, walked in C by their schema and changed by copying slices: what a
client's request sizes (20 000 coordinators, 5 000 resources' configs, 100 000 produce partitions)
costs a few nanoseconds a field, nothing is decoded but the entries that change, and those only as
far as the change needs.

- `address_edits`: where the entries of a struct array (or the message itself) name a broker by node
  id, host and port: each distinct address once (the caller asks the ClusterView for each), and the
  edits that put each entry's new host and port in place of the old.
- `config_edits`: the edits that hide a DescribeConfigs value naming an address (rewrite.py says why).
- `fields_end`: where a run of a message's own fields ends: a Produce response's throttle_time_ms
  and its top-level tagged fields lie behind every partition's result.
- `entry_spans`: the bytes of each element of a struct or string array, with up to two of its
  fields read (a topic mutation's topics and results).
- `splice`: the bytes with the edits applied, in one copy.
- `holds_host_port`: whether bytes hold a host:port.

The walks are wire_walk's (Program, Walk: Kafka's limits on every string and array); a response that
breaks them raises FrameError, and the caller closes the connection. Compiled as response_walk_c
(typed by response_walk_c.pxd), interpreted as it is: quotagate/compiled.py.
"""

try:
    import cython
except ImportError:  # interpreted without Cython installed: quotagate/_cython_shadow.py
    from quotagate import _cython_shadow as cython

from array import array

from quotagate.protocol import buffers, wire_walk
from quotagate.protocol.framing import FrameError

# Compiled, these are cimported (response_walk_c.pxd): C calls, not the Python names imported here.
from quotagate.protocol.produce_walk import _count, _string_length, i32
from quotagate.protocol.wire_walk import OP_ARRAY_STRING, STRIDE, _put

# What a host:port looks like in a config value: a run of host characters (letters, digits, '.',
# '-', ':', and '[' ']' around an IPv6 address) holding at least one letter, digit or ']' before a
# ':', then a port of 1 to 5 digits followed by neither a digit nor a '.' (a version number such as
# 3.9-IV0:1.2 is not an address). ASCII only: Kafka's own parsers read nothing else as an address.
HOST_CHAR = 1
HOST_START = 2


def _char_classes():
    classes = bytearray(256)
    for c in b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789]":
        classes[c] = HOST_CHAR | HOST_START
    for c in b".-[:":
        classes[c] = HOST_CHAR
    return bytes(classes)


CHAR_CLASSES = _char_classes()
_COLON = 58
_DOT = 46
_ZERO = 48
_NINE = 57
MAX_PORT_DIGITS = 5
# How many distinct addresses of one message address_edits compares byte for byte (a cluster's
# brokers, nearly always); past them it looks addresses up by their bytes.
MAX_COMPARED = 16
# What field_values reads.
VALUE_STRING = 0
VALUE_INT16 = 1
VALUE_INT32 = 2
VALUE_COUNT = 3
VALUE_UUID = 4


def holds_host_port(data):
    """Whether `data` (bytes) holds a host:port somewhere (see CHAR_CLASSES)."""
    return _holds_host_port(data, 0, len(data))


def _holds_host_port(buf, start, end):
    classes = CHAR_CLASSES
    started = False  # the run of host characters before `at` holds a letter, digit or ']'
    at = start
    while at < end:
        c = buf[at]
        if c == _COLON and started:
            digits = 0
            after = at + 1
            while after < end and _ZERO <= buf[after] <= _NINE and digits <= MAX_PORT_DIGITS:
                digits += 1
                after += 1
            if 1 <= digits <= MAX_PORT_DIGITS and (after >= end or buf[after] != _DOT):
                return True
        kind = classes[c]
        if kind == 0:
            started = False
        elif kind & HOST_START:
            started = True
        at += 1
    return False


def address_edits(prog, frame, pos, array_at, node_at, error_at, rest):
    """The broker addresses of a message (`prog`: its Program) in `frame` from its body at `pos`:
    in the elements of the struct array of op `array_at` (a field of the message itself), or, with
    `array_at` -1, in the message's own fields. `node_at` is the op of the node id, which the host
    and the port follow; `error_at` the op of an int16 error code (-1: none): an entry with an error,
    or a node id below 0, names no broker. `rest`: walk what follows the array too.

    Returns (addresses, edits, array_start, array_end, end): each distinct (node id, host as bytes,
    port) in the order first named; for each entry naming one, (where its host starts, where its
    port ends, the index of its address), three numbers each in an array("q"), for `splice`; where
    the array (its count) starts and where it ends; where the walk ended. No Python object is made
    per entry: an address is compared with the first MAX_COMPARED distinct ones byte for byte, and
    looked up by its bytes past them."""
    walk = wire_walk.Walk(prog, frame)
    ops = walk._op
    buf = walk._buf
    host_at = node_at + STRIDE
    port_at = host_at + STRIDE
    if array_at >= 0:
        pos = walk.fields(pos, 0, array_at)
        array_start = pos
        count, pos = walk.count(pos, array_at)
        start = ops[array_at + 2]
        stop = ops[array_at + 3]
    else:
        array_start = pos
        count = 1
        start = 0
        stop = prog.top
    addresses = []
    known = {}  # past MAX_COMPARED: the bytes of node id, host and port -> their index in `addresses`
    compared = array("q", bytes(16 * MAX_COMPARED))  # the first distinct ones: (start, end) in the frame
    made_edits = array("q", bytes(24 * count))  # count is within the bytes left (Kafka's limits)
    edits = made_edits
    made = 0
    for _e in range(count):
        node_id = -1
        error = 0
        node_start = 0
        host_start = 0
        port_end = 0
        at = start
        while at < stop:
            if at == node_at:
                node_id = walk.int32(pos, at)
                node_start = pos
            elif at == error_at:
                error = walk.int16(pos, at)
            pos = walk.field(pos, at)
            if at == node_at:
                host_start = pos
            elif at == port_at:
                port_end = pos
            at += STRIDE
        if array_at >= 0 and walk.flexible:
            pos = walk.tags(pos)
        if error != 0 or node_id < 0 or port_end <= host_start:
            continue
        index = -1
        distinct = len(addresses)
        for i in range(distinct if distinct < MAX_COMPARED else MAX_COMPARED):
            if _same(buf, compared[2 * i], compared[2 * i + 1], node_start, port_end):
                index = i
                break
        key = None
        if index < 0 and distinct >= MAX_COMPARED:
            key = cython.cast(bytes, buf[node_start:port_end])
            index = known.get(key, -1)
        if index < 0:
            index = distinct
            if distinct < MAX_COMPARED:
                compared[2 * distinct] = node_start
                compared[2 * distinct + 1] = port_end
            else:
                known[key] = index
            length, host_pos = walk._length(host_start, host_at)
            host = cython.cast(bytes, buf[host_pos : host_pos + length])
            addresses.append((node_id, host, i32(buf, port_end - 4)))
        edits[3 * made] = host_start
        edits[3 * made + 1] = port_end
        edits[3 * made + 2] = index
        made += 1
    array_end = pos
    if rest:
        if array_at >= 0:
            pos = walk.after(pos, array_at)
        elif walk.flexible:
            pos = walk.tags(pos)
    return addresses, made_edits[: 3 * made], array_start, array_end, pos


def _same(buf, start, end, other, other_end):
    """Whether buf[start:end] and buf[other:other_end] hold the same bytes."""
    if end - start != other_end - other:
        return False
    return buffers.equal(buf, start, buf, other, end - start)


def config_edits(prog, frame, pos, address_names):
    """The edits (array("q"), for `splice`, with replacements [a null string, a true bool]) that hide each config
    of a DescribeConfigs response (`prog`: its Program; body at `pos`) that names an address and is
    not sensitive already: its value null, is_sensitive true, every synonym's value null. A config
    names an address when its name or a synonym's is in `address_names` (a set of bytes), or when
    its value or a synonym's holds a host:port. Every result and config is walked; a name is looked
    up only when its length is one of the names'."""
    walk = wire_walk.Walk(prog, frame)
    ops = walk._op
    buf = walk._buf
    ops_at = prog.ops_at
    results_at = ops_at["Results"]
    configs_at = ops_at["Results.Configs"]
    name_at = ops_at["Results.Configs.Name"]
    value_at = ops_at["Results.Configs.Value"]
    sensitive_at = ops_at["Results.Configs.IsSensitive"]
    synonyms_at = ops_at.get("Results.Configs.Synonyms", -1)
    synonym_name_at = ops_at.get("Results.Configs.Synonyms.Name", -1)
    synonym_value_at = ops_at.get("Results.Configs.Synonyms.Value", -1)
    longest = max([len(name) for name in address_names]) if address_names else 0
    lengths = bytearray(longest + 1)  # lengths[n]: some name is n bytes long
    for name in address_names:
        lengths[len(name)] = 1
    edits = array("q")
    synonym_values = []  # (start, end) of one config's synonyms' values
    pos = walk.fields(pos, 0, results_at)
    results, pos = walk.count(pos, results_at)
    for _r in range(results):
        at = ops[results_at + 2]
        while at < ops[results_at + 3]:
            if at != configs_at:
                pos = walk.field(pos, at)
                at += STRIDE
                continue
            configs, pos = walk.count(pos, at)
            for _c in range(configs):
                names_address = False
                sensitive = 0
                value_start = value_end = sensitive_pos = 0
                del synonym_values[:]
                field_at = ops[configs_at + 2]
                while field_at < ops[configs_at + 3]:
                    if field_at == sensitive_at:
                        if pos + 1 > walk.end:
                            walk._truncated(field_at)
                        sensitive = buf[pos]
                        sensitive_pos = pos
                    if field_at == synonyms_at:
                        synonyms, pos = walk.count(pos, field_at)
                        for _s in range(synonyms):
                            synonym_at = ops[synonyms_at + 2]
                            while synonym_at < ops[synonyms_at + 3]:
                                start = pos
                                pos = walk.field(pos, synonym_at)
                                if synonym_at == synonym_name_at or synonym_at == synonym_value_at:
                                    if _names_address(
                                        walk,
                                        start,
                                        synonym_at,
                                        synonym_at == synonym_name_at,
                                        address_names,
                                        lengths,
                                        longest,
                                    ):
                                        names_address = True
                                    if synonym_at == synonym_value_at:
                                        synonym_values.append((start, pos))
                                synonym_at += STRIDE
                            if walk.flexible:
                                pos = walk.tags(pos)
                    else:
                        start = pos
                        pos = walk.field(pos, field_at)
                        if field_at == name_at or field_at == value_at:
                            if _names_address(
                                walk, start, field_at, field_at == name_at, address_names, lengths, longest
                            ):
                                names_address = True
                            if field_at == value_at:
                                value_start = start
                                value_end = pos
                    field_at += STRIDE
                if walk.flexible:
                    pos = walk.tags(pos)
                if names_address and not sensitive:
                    edits.extend((value_start, value_end, 0, sensitive_pos, sensitive_pos + 1, 1))
                    for span in synonym_values:
                        edits.extend((span[0], span[1], 0))
            at += STRIDE
        if walk.flexible:
            pos = walk.tags(pos)
    walk.after(pos, results_at)
    return edits


def _names_address(walk, start, at, is_name, address_names, lengths, longest):
    """Whether the string of op `at` at `start` (walked already) is a name in `address_names` or,
    if not a name, a value holding a host:port."""
    length, pos = walk._length(start, at)
    if length <= 0:
        return False
    buf = walk._buf
    if is_name:
        if length > longest or not lengths[length]:
            return False
        name = cython.cast(bytes, buf[pos : pos + length])
        return name in address_names
    return _holds_host_port(buf, pos, pos + length)


def fields_end(prog, frame, pos, start_at, stop_at):
    """Where the message's own fields of ops [start_at, stop_at) end, walked from `pos`: with 0 and
    a field's op, where that field starts; with 0 and `prog.top`, where the top-level tagged fields
    start."""
    walk = wire_walk.Walk(prog, frame)
    return walk.fields(pos, start_at, stop_at)


def entry_spans(prog, frame, pos, array_at, field_ats):
    """The elements of the array of op `array_at` (of structs or of strings: a field of the message
    itself, whose fields before it are walked from `pos`), each walked whole. Returns (spans, where
    the array (its count) starts, where it ends): `spans` an array("q") of 2 + len(field_ats)
    numbers per element: where it starts, where it ends, and where each field of the ops
    `field_ats` starts in it (-1: not in it). An element of an array of strings is its own field."""
    walk = wire_walk.Walk(prog, frame)
    ops = walk._op
    wanted = len(field_ats)
    wanted_ops = array("i", field_ats)
    fields = wanted_ops
    stride = 2 + wanted
    pos = walk.fields(pos, 0, array_at)
    array_start = pos
    count, pos = walk.count(pos, array_at)
    made_spans = array("q", bytes(8 * stride * count))  # count is within the bytes left (Kafka's limits)
    spans = made_spans
    strings = ops[array_at] == OP_ARRAY_STRING
    for e in range(count):
        base = e * stride
        spans[base] = pos
        for k in range(wanted):
            spans[base + 2 + k] = -1
        if strings:
            if wanted:
                spans[base + 2] = pos
            pos = walk.string_element(pos, array_at)
        else:
            at = ops[array_at + 2]
            while at < ops[array_at + 3]:
                for k in range(wanted):
                    if fields[k] == at:
                        spans[base + 2 + k] = pos
                pos = walk.field(pos, at)
                at += STRIDE
            if walk.flexible:
                pos = walk.tags(pos)
        spans[base + 1] = pos
    return made_spans, array_start, pos


def field_values(frame, spans, stride, k, kind, flexible):
    """The values of field `k` of each element of `spans` (entry_spans' array, `stride` numbers per
    element), read where they stand in `frame` (walked already, so within it), as a list: for kind
    VALUE_STRING bytes (None: null), VALUE_INT16 and VALUE_INT32 ints, VALUE_COUNT an array's count
    (0: null), VALUE_UUID 16 bytes; None where the element has no such field."""
    values = []
    if len(spans) == 0:
        return values
    buf = buffers.chars(frame)
    end = len(frame)
    strings = kind == VALUE_STRING  # the kinds are module names, seen from Python: compared once
    shorts = kind == VALUE_INT16
    ints = kind == VALUE_INT32
    counts = kind == VALUE_COUNT
    for base in range(0, len(spans), stride):
        at = spans[base + 2 + k]
        if at < 0:
            values.append(None)
        elif strings:
            length, at = _string_length(buf, at, end, flexible)
            if length < 0 or at + length > end:
                values.append(None)
            else:
                values.append(cython.cast(bytes, buf[at : at + length]))
        elif shorts:
            value = (buf[at] << 8) | buf[at + 1]
            values.append(value - 0x10000 if value >= 0x8000 else value)
        elif ints:
            values.append(i32(buf, at))
        elif counts:
            count, at = _count(buf, at, end, flexible)
            values.append(count if count > 0 else 0)
        else:
            values.append(cython.cast(bytes, buf[at : at + 16]))
    return values


def splice(data, edits, replacements, framed):
    """`data` (bytes or a memoryview) with each edit replacing data[start:end] by replacements[index]
    (bytes): `edits` is an array("q") of (start, end, index) triples, in order and apart, as the
    walks make them. `framed`: `data` is a frame, whose size prefix is set to its new size."""
    end = len(data)
    count = len(edits) // 3
    size = end
    at = 0
    for i in range(count):
        start = edits[3 * i]
        stop = edits[3 * i + 1]
        if start < at or stop < start or stop > end:
            raise FrameError(f"an edit of bytes {start}..{stop} out of order or outside 0..{end}")
        size += len(replacements[edits[3 * i + 2]]) - (stop - start)
        at = stop
    out = bytearray(size)
    out_buf = out
    if end == 0:
        return bytes(out)
    buf = buffers.chars(data)
    written = 0
    at = 0
    for i in range(count):
        start = edits[3 * i]
        written = _put(out_buf, written, buf, at, start)
        replacement = replacements[edits[3 * i + 2]]
        if len(replacement):
            replacement_buf = replacement
            written = _put(out_buf, written, replacement_buf, 0, len(replacement))
        at = edits[3 * i + 1]
    _put(out_buf, written, buf, at, end)
    if framed:
        if size < 4:
            raise FrameError("a frame shorter than its size")
        body = size - 4
        out[0] = (body >> 24) & 0xFF
        out[1] = (body >> 16) & 0xFF
        out[2] = (body >> 8) & 0xFF
        out[3] = body & 0xFF
    return bytes(out)
