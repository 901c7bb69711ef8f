"""Independent readers for the ingest tests: a few lines of Python per format, written
from the format descriptions, so trainscope's counts are checked against something that
shares none of its code."""

import struct


def _varint(b, i):
    result = shift = 0
    while True:
        c = b[i]
        i += 1
        result |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return result, i


def proto_fields(b):
    """Yields (field, wire_type, value) of one protobuf message."""
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        field, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 1:
            v, i = b[i:i + 8], i + 8
        elif wt == 5:
            v, i = b[i:i + 4], i + 4
        elif wt == 2:
            n, i = _varint(b, i)
            v, i = b[i:i + n], i + n
        else:
            raise ValueError(f"wire type {wt}")
        yield field, wt, v


def tfrecords(data):
    i = 0
    while i + 12 <= len(data):
        (n,) = struct.unpack("<Q", data[i:i + 8])
        yield data[i + 12:i + 12 + n]
        i += 12 + n + 4


def tfevents_points(path):
    """{tag: [(step, value)]} of simple_value scalars, and {tag: count} of histograms."""
    scalars, histograms = {}, {}
    for record in tfrecords(open(path, "rb").read()):
        step = 0
        summaries = []
        for f, wt, v in proto_fields(record):
            if f == 2:
                step = v if v < 1 << 63 else v - (1 << 64)
            elif f == 5:
                summaries.append(v)
        for summary in summaries:
            for f, _, value in proto_fields(summary):
                if f != 1:
                    continue
                fields = {ff: vv for ff, _, vv in proto_fields(value)}
                tag = fields.get(1, b"").decode("utf-8", "replace")
                if 2 in fields:
                    scalars.setdefault(tag, []).append((step, struct.unpack("<f", fields[2])[0]))
                elif 5 in fields:
                    histograms[tag] = histograms.get(tag, 0) + 1
    return scalars, histograms
