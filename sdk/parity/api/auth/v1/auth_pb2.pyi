from google.protobuf import descriptor_pb2 as _descriptor_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLE_UNSPECIFIED: _ClassVar[Role]
    ROLE_READ: _ClassVar[Role]
    ROLE_AGENT: _ClassVar[Role]
    ROLE_SERVICE: _ClassVar[Role]
    ROLE_ADMIN: _ClassVar[Role]
ROLE_UNSPECIFIED: Role
ROLE_READ: Role
ROLE_AGENT: Role
ROLE_SERVICE: Role
ROLE_ADMIN: Role
REQUIRED_ROLE_FIELD_NUMBER: _ClassVar[int]
required_role: _descriptor.FieldDescriptor
