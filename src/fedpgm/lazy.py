"""Names a package exports but imports on first use, so that importing the package (as the
CLI does for ``fedpgm --help``) loads no torch or pandas.

    _WHERE = {"FedPC": "fedpgm.fedpc.model", ...}
    __all__ = sorted(_WHERE)
    __getattr__ = exports(__name__, _WHERE)
"""

from __future__ import annotations

import importlib
from typing import Any, Callable


def exports(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``where[name]`` (a module path) and returns its ``name``."""

    def __getattr__(name: str) -> Any:
        if name in where:
            return getattr(importlib.import_module(where[name]), name)
        raise AttributeError(f"module '{package}' has no attribute {name!r}")

    return __getattr__
