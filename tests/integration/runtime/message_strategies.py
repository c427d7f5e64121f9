"""Hypothesis strategies for any protobuf message, built from its descriptor.

Every field may be set or left out, with values a hostile or buggy client could send:
integers across their whole wire range, NaN and infinities, unknown enum numbers,
control characters in strings, timestamps far outside the calendar. Bytes fields are
often packed int32 or float32 arrays, the shape of token ids and logprobs, so that
range checks are reached rather than only length checks.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from hypothesis import strategies as st

# Nesting deep enough to reach every field of the Parity API (a call's choices' token
# arrays sit three levels down) without generating enormous messages.
DEFAULT_DEPTH = 4
MAX_REPEATED = 3

_INT32 = st.integers(-(2**31), 2**31 - 1)
_RANGES = {
    FieldDescriptor.TYPE_INT32: _INT32,
    FieldDescriptor.TYPE_SINT32: _INT32,
    FieldDescriptor.TYPE_SFIXED32: _INT32,
    FieldDescriptor.TYPE_INT64: st.integers(-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: st.integers(-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: st.integers(-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: st.integers(0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: st.integers(0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: st.integers(0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: st.integers(0, 2**64 - 1),
}
# Small values reach real branches (page sizes, steps, counts); the full range reaches overflow.
_SMALL = st.integers(-3, 20)
_SMALL_UNSIGNED = st.integers(0, 20)
_UNSIGNED = {FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32, FieldDescriptor.TYPE_UINT64,
             FieldDescriptor.TYPE_FIXED64}  # fmt: skip
_FLOATS = st.one_of(st.floats(width=32), st.sampled_from([0.0, -0.0, 1.0, -1.0]))
_DOUBLES = st.one_of(st.floats(), st.sampled_from([0.0, 1.0, -1.0, 0.5]))
_STRINGS = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        ["", "unassigned", "s", "c", "trainer", "x" * 300, "a\x00b", "a\x1fb", "\u00e9\u4e2d"]
    ),
)
_PACKED_INT32 = st.lists(_INT32, max_size=8).map(
    lambda ids: b"".join(i.to_bytes(4, "little", signed=True) for i in ids)
)
# Bit patterns reach every NaN payload and both infinities.
_PACKED_FLOAT32 = st.lists(st.integers(0, 2**32 - 1), max_size=8).map(
    lambda bits: b"".join(b.to_bytes(4, "little") for b in bits)
)
_BYTES = st.one_of(
    st.binary(max_size=48), _PACKED_INT32, _PACKED_FLOAT32, st.just(b'{"model": "m"}')
)


def messages(descriptor: Descriptor, depth: int = DEFAULT_DEPTH) -> st.SearchStrategy[Message]:
    """Messages of `descriptor`'s type, each field set or not."""
    return _message(descriptor, depth)


@st.composite
def _message(draw: st.DrawFn, descriptor: Descriptor, depth: int) -> Message:
    made = message_factory.GetMessageClass(descriptor)()
    for field in descriptor.fields:
        if not draw(st.booleans()):
            continue
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            key_field, value_field = (
                field.message_type.fields_by_name[name] for name in ("key", "value")
            )
            if value_field.message_type is not None and depth <= 1:
                continue
            entries = draw(
                st.dictionaries(
                    _scalar(key_field), _value(value_field, depth - 1), max_size=MAX_REPEATED
                )
            )
            target = getattr(made, field.name)
            for key, value in entries.items():
                if value_field.message_type is not None:
                    target[key].CopyFrom(value)
                else:
                    target[key] = value
        elif field.is_repeated:
            if field.message_type is not None and depth <= 1:
                continue
            values = draw(st.lists(_value(field, depth - 1), max_size=MAX_REPEATED))
            target = getattr(made, field.name)
            if field.message_type is not None:
                for value in values:
                    target.add().CopyFrom(value)
            else:
                target.extend(values)
        elif field.message_type is not None:
            if depth <= 1:
                continue
            getattr(made, field.name).SetInParent()
            getattr(made, field.name).MergeFrom(draw(_message(field.message_type, depth - 1)))
        else:
            setattr(made, field.name, draw(_scalar(field)))
    return made


def _value(field: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    return _message(field.message_type, depth) if field.message_type is not None else _scalar(field)


def _scalar(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind in _RANGES:
        return st.one_of(_SMALL_UNSIGNED if kind in _UNSIGNED else _SMALL, _RANGES[kind])
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind == FieldDescriptor.TYPE_FLOAT:
        return _FLOATS
    if kind == FieldDescriptor.TYPE_DOUBLE:
        return _DOUBLES
    if kind == FieldDescriptor.TYPE_STRING:
        return _STRINGS
    if kind == FieldDescriptor.TYPE_BYTES:
        return _BYTES
    if kind == FieldDescriptor.TYPE_ENUM:
        # Proto3 enums are open: an unknown number decodes and must be refused by the service.
        assert field.enum_type is not None  # every enum field has its enum's descriptor
        return st.one_of(st.sampled_from([v.number for v in field.enum_type.values]), _INT32)
    raise TypeError(f"no strategy for {field.full_name} of type {kind}")
