"""Generated from protos/ by scripts/generate_protos.py. Do not edit."""
