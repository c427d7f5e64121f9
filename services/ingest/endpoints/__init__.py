"""One package per API ingest serves, which http_api.py routes to; session_resolution.py says which session
a request belongs to."""
