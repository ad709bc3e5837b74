"""The federation runtime: messages and their codec, the byte ledger, client handlers, the
server-side federation handle, the in-process and Flower backends, the privacy audit and
private row alignment."""

from fedpgm.federation.base import ClientFailed, ClientFailure, Federation, Replies
from fedpgm.federation.codec import CodecError, Message, decode, encode
from fedpgm.federation.handlers import ClientContext, HandlerSet
from fedpgm.federation.inprocess import InProcessFederation
from fedpgm.federation.ledger import Ledger
from fedpgm.federation.privacy import PrivacyAudit, PrivacyViolation
from fedpgm.federation.psi import align_rows  # also registers the runtime's PSI handlers

__all__ = ["ClientContext", "ClientFailed", "ClientFailure", "CodecError", "Federation",
           "HandlerSet", "InProcessFederation", "Ledger", "Message", "PrivacyAudit",
           "PrivacyViolation", "Replies", "align_rows", "decode", "encode"]
