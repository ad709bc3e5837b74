"""The cost of decentralization in vertical federations: exact Bayesian predictive losses of
collaborative vs decentralized learning and inference, under privacy constraints."""

from fedpgm.decentralization.engine import SCHEMES, conditional_entropy, leakage, losses
from fedpgm.decentralization.model import Channel, DiscreteModel, identity_channel, xor_channel

__all__ = ["Channel", "DiscreteModel", "SCHEMES", "conditional_entropy", "identity_channel",
           "leakage", "losses", "xor_channel"]
