"""The inference tier: the tiny test model and the launcher for the vLLM server that serves it."""
