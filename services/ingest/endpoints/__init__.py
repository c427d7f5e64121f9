"""One module (or package) per API ingest serves; http_api.py routes to them."""
