"""FedPC's defaults that adapt to the table and to each client's rows (``None`` = auto).

- ``min_instances_slice``: LearnSPN's slice minimum, resolved from the rows each circuit is
  learned on: LearnSPNCV's starting rule, sqrt(rows) and at least 10
  (``circuits.selection.default_settings``), at most the paper's 100, and raised by a client to
  its policy's ``min_rows``. The paper's fixed 100 leaves a client of 90 rows fully factorised
  (penguins horizontal x3: accuracy 0.435); sqrt(rows) gave the best test log-likelihood of
  the rules tried (a tenth or a twentieth of the rows: Wage horizontal x3 -12.19 nats per row
  against -13.40 and -12.55; CPS1988 x3 -15.28 against -15.32 and -15.32).
- ``glue``: ``auto`` is aligned gluing where two or more clients each hold columns of their own
  (vertical, hybrid) and every one of them takes part (its policy allows it and it has an
  identity key), else random gluing of one cluster per client (the plain product of the client
  circuits; the paper's Algorithm 1 pairs K clusters at random). Aligned gluing learns how often
  the clients' clusters co-occur from a masked sum (``fedpc.server.cooccurrence``; the
  coordinator learns the tuples' histogram, no row's cluster), models the tuples by their
  observed counts or by latent classes, whichever held-out tuples prefer (``plan.tuple_model``),
  and mixes that joint with the plain product of the clients' circuits of all their rows, the
  product's weight chosen on the same folds. Over the 45 tables of docs/real_tables.md,
  vertical x3, test LL below centralized, median (tables below the product): random K = 1
  11.0%; aligned (observed tuples) with 2, 4, 8, 16, 32 and 64 clusters 10.3% (4), 6.8% (2),
  6.3% (1), 4.6% (0), 4.0% (0), 4.1% (0). Latent classes matter where clients are many
  (docs/fedpc.md, "Defaults that adapt").
- ``clusters``: 1 for random and combinatorial gluing, whose pairing of clusters across clients
  is blind to the rows and adds dependence the data does not have (vertical x3, test nats per
  row, 2 random clusters against the product: a 10,000-row sample of diamonds -20.86 against
  -17.46, Default -22.93 against -19.27); ``ALIGNED_CLUSTERS`` for aligned gluing.
- ``cluster_fit`` stays ``learn`` (the paper's: a LearnSPN structure per cluster, on a 32nd of
  a client's rows with aligned gluing). ``refit`` learns one circuit on all the client's rows and
  refits its parameters by ``CLUSTER_EM_PASSES`` EM passes over each cluster's rows, every node
  whose statistics would rest on fewer than ``min_rows`` of them keeping its parameters
  (``circuits.em.resting``'s floor). Over the 45 tables of docs/real_tables.md it is worse: test
  LL below centralized, median, learn -> refit (better / worse by more than half a point, of
  45): vertical x3 4.05% -> 3.86% (10 / 20), x8 -1.32% -> -0.39% (4 / 27), hybrid x3 6.79% ->
  7.06% (3 / 23), x8 2.66% -> 4.93% (1 / 18). With only leaves and sums below the floor kept
  (no floor per edge) it was better (2.41%, -1.34%, 6.97%, 2.98%, no fit below the plain
  product), but a sum's edge could then rest on one row of a cluster: not kept.
- ``by_label`` stays off (the paper's): one structure per class raised the accuracy of small
  multi-class tables (penguins horizontal x3: 0.986 to 1.000) but cost log-likelihood and the
  minority class's F1 on binary ones (Wage: -13.40 to -13.80 nats, macro-F1 0.670 to 0.616;
  Default: macro-F1 0.705 to 0.572). The label's dependence on the other clients' columns
  survives a vertical split through aligned gluing, whose label-holding client clusters each
  class apart (``fedpc.client.clusters_of``).
"""

from __future__ import annotations

from fedpgm.circuits.learners import learner_spec
from fedpgm.circuits.selection import default_settings

MAX_SLICE = 100  # the paper's
ALIGNED_CLUSTERS = 32
CLUSTER_EM_PASSES = 4  # EM passes of a refitted cluster circuit (cluster_fit="refit"; 2 did worse in a first version)
CLUSTER_FITS = ("learn", "refit")


def min_instances(rows: int) -> int:
    """The auto slice minimum of a circuit learned on ``rows`` rows (module doc)."""
    return min(MAX_SLICE, int(default_settings(rows, 1)["min_instances_slice"]))


def glue(requested: str, spaces: list[tuple[list[str], list[str]]], described: dict) -> str:
    """The gluing of a fit: ``requested``, or for ``auto`` aligned where at least two clients hold
    a subspace of their own (``spaces``: (columns, holders)) and every one of them says in its
    ``describe`` reply that it takes part, else random (module doc)."""
    if requested != "auto":
        return requested
    own = [holders[0] for _names, holders in spaces if len(holders) == 1]
    able = all(bool(described[c].config.get("aligned")) for c in own)
    return "aligned" if len(own) >= 2 and able else "random"


def cluster_fit(requested: str, learner: str) -> str:
    """How a client fits its cluster circuits: ``requested`` (module doc), learn for a dense
    learner (its circuits are trained by epochs, not refitted by EM here)."""
    return "learn" if learner_spec(learner).dense else requested


def clusters(glue: str) -> int:
    """The auto number of clusters per single-client subspace for gluing ``glue``."""
    return ALIGNED_CLUSTERS if glue == "aligned" else 1


def resolve(params: dict, rows: int, floor: int = 1) -> dict:
    """``params`` with an auto (None) ``min_instances_slice`` resolved for a circuit learned on
    ``rows`` rows, at least ``floor`` (a client's policy)."""
    if params.get("min_instances_slice", 0) is not None:
        return params
    return {**params, "min_instances_slice": max(floor, min_instances(rows))}
