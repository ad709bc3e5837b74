"""The federation runtime: messages and their codec, the byte ledger, client handlers, the
server-side federation handle, the in-process and Flower backends, the privacy audit and
private row alignment.

Names are imported on first use, so that importing one light submodule (the CLI's
``fedpgm.federation.lifecycle``) loads no numpy, pandas or torch.
"""

import importlib

_WHERE = {"ClientFailed": "base", "ClientFailure": "base", "Federation": "base", "Replies": "base",
          "CodecError": "codec", "Message": "codec", "decode": "codec", "encode": "codec",
          "ClientContext": "handlers", "HandlerSet": "handlers", "InProcessFederation": "inprocess",
          "Ledger": "ledger", "PrivacyAudit": "privacy", "PrivacyViolation": "privacy", "align_rows": "psi"}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(f"fedpgm.federation.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'fedpgm.federation' has no attribute {name!r}")
