"""The stack a run drives: a deployed one its settings name, or a local one it brings up in RUN_DIR/stack; and
the SDK pointed at it while the run lasts, given its own settings back after."""

from __future__ import annotations

import sys
from pathlib import Path

from parity.clients import transport
from parity.config import configure, current_config
from parity.training.local_stack import LocalStack
from parity.training.settings import StackAddresses, TrainSettings


class RunStack:
    def __init__(self) -> None:
        self.local: LocalStack | None = None
        """The stack brought up for this run; None while none is, or when the run reaches a deployed one."""
        self._previous_config = current_config()
        self._previous_security = transport.process_security()

    @property
    def embedded(self) -> bool:
        """Whether the run brought its stack up itself (its checkpoints then live in the run folder)."""
        return self.local is not None

    def open(
        self, settings: TrainSettings, run_dir: Path, model: Path, teacher: Path | None
    ) -> StackAddresses:
        """Bring up (or reach) the stack, and point the SDK's calls at it."""
        addresses = (
            settings.stack
            if settings.stack is not None
            else self._bring_up(settings, run_dir, model, teacher)
        )
        # The local stack authenticates every call: the driver starts runs (admin), its agents call as agents.
        credentials = (
            {"token": self.local.token("admin"), "api_key": self.local.token("agent")}
            if self.local
            else {}
        )
        configure(ingest_url=addresses.ingest_url, assembler_address=addresses.assembler,
                         **({"store_address": addresses.store} if addresses.store else {}), **credentials)  # fmt: skip
        return addresses

    def _bring_up(
        self, settings: TrainSettings, run_dir: Path, model: Path, teacher: Path | None
    ) -> StackAddresses:
        self.local = LocalStack.for_run(run_dir / "stack", settings, model, teacher)
        print(
            f"starting the local stack (logs in {self.local.log_dir})", file=sys.stderr, flush=True
        )
        self.local.start(settings.startup_timeout_s)
        print(
            f"console: {self.local.console_url} (the run, its batches, every trajectory)",
            file=sys.stderr,
            flush=True,
        )
        return self.local.addresses

    def close(self) -> None:
        """Stop the local stack, if one was brought up; restore the SDK's settings."""
        if self.local is not None:
            self.local.stop()
            self.local = None
        previous = self._previous_config
        configure(ingest_url=previous.ingest_url, assembler_address=previous.assembler_address,
                         store_address=previous.store_address, api_key=previous.api_key)  # fmt: skip
        transport.set_process_security(self._previous_security)
