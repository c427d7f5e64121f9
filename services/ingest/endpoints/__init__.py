"""One package per API ingest serves, which http_api.py routes to; request_start.py is the start every endpoint
makes of a request (its body, model, session, and the model serving it), session_resolution.py says which
session a request belongs to."""
