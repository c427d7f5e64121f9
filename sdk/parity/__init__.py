"""Parity SDK."""
