"""The federation runtime: messages and their codec, the byte ledger, client handlers, the
server-side federation handle, the in-process and Flower backends, the privacy audit and
private row alignment.

Names are imported on first use, so that importing one light submodule (the CLI's
``fedpgm.federation.lifecycle``) loads no numpy, pandas or torch.
"""

from fedpgm.lazy import exports

_MODULE_OF = {"ClientFailed": "base", "ClientFailure": "base", "Federation": "base", "Replies": "base",
              "CodecError": "codec", "Message": "codec", "decode": "codec", "encode": "codec",
              "ClientContext": "handlers", "HandlerSet": "handlers", "InProcessFederation": "inprocess",
              "Ledger": "ledger", "PrivacyAudit": "privacy", "PrivacyViolation": "privacy", "align_rows": "psi"}
_WHERE = {name: f"fedpgm.federation.{module}" for name, module in _MODULE_OF.items()}
__all__ = sorted(_WHERE)

__getattr__ = exports(__name__, _WHERE)
