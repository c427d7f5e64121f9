"""Run inside an isolated environment: the SDK's generated code on that environment's protobuf and grpcio.

Writes a call to a real store (served from Parity's own environment) through parity.clients, reads it
back, and checks it survived the trip byte for byte. Prints the runtime's versions as JSON.
"""

import json
import sys

import google.protobuf
import grpc

from parity.api.common.v1 import llm_call_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.clients import StoreClient
from parity.core import tokens

address, session_id = sys.argv[1], sys.argv[2]
call = llm_call_pb2.LlmCall(
    call_id=f"{session_id}-c0",
    session_id=session_id,
    model="tiny",
    request_json=b'{"model": "tiny"}',
    prompt_token_ids=tokens.pack_token_ids([1, 2, 3, 70000]),
    metadata={"task": "ends"},
)
call.choices.add(
    index=0,
    token_ids=tokens.pack_token_ids([5, 6]),
    logprobs=tokens.pack_floats([-0.5, -1.25]),
    finish_reason="stop",
    text="hi",
)
assert llm_call_pb2.LlmCall.FromString(call.SerializeToString()) == call
client = StoreClient(address)
written = client.write_calls(store_pb.WriteCallsRequest(calls=[call]))
stored = client.get_call(
    store_pb.GetCallRequest(call_id=call.call_id, view=store_pb.CALL_VIEW_FULL)
).call
for field in ("call_id", "session_id", "prompt_token_ids", "request_json", "metadata"):
    assert getattr(stored, field) == getattr(call, field), field
assert (
    stored.choices[0].token_ids == call.choices[0].token_ids
    and stored.choices[0].logprobs == call.choices[0].logprobs
)
print(
    json.dumps(
        {
            "protobuf": google.protobuf.__version__,
            "grpcio": grpc.__version__,
            "written": written.written_count,
        }
    )
)
