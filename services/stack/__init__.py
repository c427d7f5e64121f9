"""Runs the whole Parity stack as separate processes on one machine."""
