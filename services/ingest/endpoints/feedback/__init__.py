"""Late feedback on a session or one of its calls (POST /sessions/{id}/feedback): protocol.py (the request as a
Reward), serving.py (the endpoint); capture/feedback_sink.py gets it into the store or the spool."""
