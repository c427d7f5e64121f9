"""The token store (calls, sessions, rewards)."""
