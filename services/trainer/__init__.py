"""The verl trainer (runs, metrics, weight sync)."""
