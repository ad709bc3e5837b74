"""The handlers a client serves: its family's (``"package.module:NAME"``) together with the
runtime's own, which every family answers: private row alignment (``fedpgm.federation.psi``) and
a secret the parties share (``fedpgm.federation.secret``). Both backends load a family here."""

from __future__ import annotations

import importlib

from fedpgm.errors import FedpgmError
from fedpgm.federation import psi, secret
from fedpgm.federation.handlers import HandlerSet


def serving(family: HandlerSet) -> HandlerSet:
    """``family`` answering the runtime's messages too."""
    return family.joined(psi.HANDLERS, secret.HANDLERS)


def load_handlers(path: str) -> HandlerSet:
    """Import ``"package.module:ATTRIBUTE"``, a ``HandlerSet``, and return it as served (``serving``)."""
    module, _, attr = path.partition(":")
    try:
        obj = getattr(importlib.import_module(module), attr or "HANDLERS")
    except (ImportError, AttributeError) as e:
        raise FedpgmError(f"cannot load handlers '{path}' ({e}); use 'package.module:NAME'") from None
    if not isinstance(obj, HandlerSet):
        raise FedpgmError(f"'{path}' is a {type(obj).__name__}, not a HandlerSet")
    return serving(obj)
