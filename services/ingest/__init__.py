"""The ingest control plane (the OpenAI-compatible proxy's operations)."""
