"""Where ingest cuts a session's episode short: its budget's caps, counted per session (budget_ledger.py), and the
served model's context (context_limit.py). A call past either is refused and recorded with the cap it met."""
