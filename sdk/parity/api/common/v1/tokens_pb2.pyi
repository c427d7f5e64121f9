from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor

class TokenEncoding(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOKEN_ENCODING_UNSPECIFIED: _ClassVar[TokenEncoding]
    TOKEN_ENCODING_INT32_LE: _ClassVar[TokenEncoding]
    TOKEN_ENCODING_FLOAT32_LE: _ClassVar[TokenEncoding]
    TOKEN_ENCODING_UINT8: _ClassVar[TokenEncoding]
TOKEN_ENCODING_UNSPECIFIED: TokenEncoding
TOKEN_ENCODING_INT32_LE: TokenEncoding
TOKEN_ENCODING_FLOAT32_LE: TokenEncoding
TOKEN_ENCODING_UINT8: TokenEncoding
