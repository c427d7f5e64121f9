"""Runs the whole Parity stack as separate processes on one machine.

What a program that lays out a stack of its own needs: a service as its own process, a free port for it, and
the error a process that did not come up, or went down, raises.
"""

from parity.services.stack.service_process import ServiceProcess, StackError, free_port

__all__ = ["ServiceProcess", "StackError", "free_port"]
