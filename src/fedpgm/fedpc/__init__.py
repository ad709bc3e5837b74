"""Federated probabilistic circuits (FedPC, Seng et al.): one-pass learning across clients.

Status: the core of Algorithm 1 (subspaces from the client-by-feature matrix, size-weighted
sums over clients for shared subspaces, per-cluster circuits for single-client subspaces,
random gluing into products, a size-weighted root) on the federation runtime. Gluing
strategies beyond ``random``, other local learners, split placement, baselines and the CLI
are still to come (issue 5).
"""

from fedpgm.fedpc.server import fit_fedpc

__all__ = ["fit_fedpc"]
