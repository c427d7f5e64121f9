"""Parity: train any agent that speaks the OpenAI API with token-exact RL.

    import parity

    client = parity.get_chat_client()          # the official OpenAI client, via ingest
    with parity.session(task="add-2-3"):
        answer = client.chat.completions.create(model="policy", messages=[...])
        parity.reward(1.0)
"""

from parity.chat_client import get_async_chat_client, get_chat_client
from parity.clients import RPCError
from parity.config import configure, current_config
from parity.rewards import areward, reward
from parity.session_slug import SessionRef
from parity.sessions import TrajectoryView, current_session, session, session_url, trajectory

__all__ = [
    "RPCError",
    "SessionRef",
    "TrajectoryView",
    "areward",
    "configure",
    "current_config",
    "current_session",
    "get_async_chat_client",
    "get_chat_client",
    "reward",
    "session",
    "session_url",
    "trajectory",
]
