"""The `exact_history` mode: the new turns spliced after the exact ids (exact_history.py), what is kept per
trajectory (history_book.py), and turn boundaries learned from the chat template (turn_rules.py)."""
