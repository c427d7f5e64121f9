"""pytest-xdist scheduling by test module.

xdist's own `loadscope` splits a module whose tests sit in classes into one unit per class, and its `loadgroup`
marks stopped reaching the scheduler with pytest 9 (xdist 3.8 renames the node id through an attribute pytest
no longer reads), so either would start a module's fixtures on both workers. This scheduler keys each test by
its module path alone, read from the node id the scheduler is given.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling


class ModuleScheduling(LoadScopeScheduling):
    """A worker takes a whole module at a time; modules named in `together`, or in a package folder named there
    (`tests/integration/console/`), share one unit and so one worker."""

    def __init__(self, config: pytest.Config, log: Producer | None = None, *,
                 together: Mapping[str, str] | None = None) -> None:  # fmt: skip
        super().__init__(config, log)
        self.together = dict(together or {})

    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.split("::", 1)[0]
        package = module.rsplit("/", 1)[0] + "/"
        return self.together.get(module) or self.together.get(package, module)
