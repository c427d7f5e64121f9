"""`parity` laid out as it is installed, in a folder of links, for tools that walk one source folder.

`parity` has two source roots (setup.py: sdk/parity, and services/ as parity.services);
import-linter and mypy find a package's modules by walking its folder, so run alone they
see no services.
"""

from __future__ import annotations

from pathlib import Path

import parity
import parity.services


def link_installed_layout(root: Path) -> None:
    """`root/parity`: a link to each entry of the SDK's folder, and `services` to parity.services' folder."""
    package = root / "parity"
    package.mkdir()
    for entry in Path(parity.__path__[0]).iterdir():
        (package / entry.name).symlink_to(entry)
    (package / "services").symlink_to(Path(parity.services.__path__[0]), target_is_directory=True)
