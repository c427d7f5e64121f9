"""POST /sessions/{session_id}/feedback: a signal about a session that arrives after it (a thumbs-up, a resolved
ticket), kept with the session as a named Reward (source "feedback").

Answered in OpenAI's error shape, as every route that is not Anthropic's:

    200 {"feedback_id", "session_id", "status": "stored" | "duplicate" | "spooled"}
    400 a field is wrong (named in `param`)       404 no such session (never recorded, or deleted), or call
    409 the feedback_id holds another value       503 it can be neither stored nor spooled
"""

from __future__ import annotations

import grpc
import orjson
import structlog

from parity.api.common.v1 import reward_pb2
from parity.services.ingest import openai_errors
from parity.services.ingest.capture.feedback_sink import FeedbackRefused, FeedbackSink
from parity.services.ingest.endpoints.feedback.protocol import session_id_of, to_reward
from parity.services.ingest.replies import JsonReply

log = structlog.get_logger(__name__)


class FeedbackServing:
    def __init__(self, sink: FeedbackSink) -> None:
        self.sink = sink

    async def create(self, path_segment: str, raw_body: bytes) -> JsonReply:
        """`path_segment`: the session id as the URL holds it, percent-encoded."""
        session_id = session_id_of(path_segment)
        reward = to_reward(session_id, raw_body)
        fields = {"session_id": session_id, "feedback_id": reward.reward_id}
        try:
            status = await self.sink.keep(reward)
        except FeedbackRefused as refusal:
            raise _http_error(refusal, reward) from None
        answer = {"feedback_id": reward.reward_id, "session_id": session_id, "status": status}
        return JsonReply(200, orjson.dumps(answer), fields | {"feedback": status})


def _http_error(refusal: FeedbackRefused, reward: reward_pb2.Reward) -> openai_errors.HttpError:
    """The store's refusal as the sender should hear it; its message says which id it could not find or what the
    feedback id holds already."""
    if refusal.code == grpc.StatusCode.NOT_FOUND:
        # The store checks the session first; a feedback on an unknown call of a known session names the call.
        unknown_session = refusal.message.startswith("unknown session")
        return openai_errors.not_found(
            f"session {reward.session_id!r} is not in the token store (never recorded, or deleted)"
            if unknown_session else f"the token store has no such call: {refusal.message}",
            "session_id" if unknown_session else "call_id",
        )  # fmt: skip
    if refusal.code == grpc.StatusCode.ALREADY_EXISTS:
        return openai_errors.HttpError(
            409, f"feedback_id {reward.reward_id!r} already holds another feedback: {refusal.message}", "conflict_error",
            "feedback_id",
        )  # fmt: skip
    log.warning(
        "store_refused_feedback",
        session_id=reward.session_id,
        feedback_id=reward.reward_id,
        reason=str(refusal),
    )
    return openai_errors.bad_request(f"the token store refused the feedback: {refusal.message}")
