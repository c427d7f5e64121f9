"""One package per API ingest serves, which http_api.py routes to; session_headers.py is what a request's headers
say of its session, as the HTTP door reads them; request_start.py is the start every endpoint makes of a request
(its body, model, session, and the model serving it), session_resolution.py says which session a request belongs
to."""
