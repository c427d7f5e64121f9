"""vLLM's own chat completions and completions API: serving.py (the endpoints)."""
