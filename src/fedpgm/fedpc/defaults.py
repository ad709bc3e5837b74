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
- ``cluster_fit``: ``auto`` refits the cluster circuits of aligned gluing with the learnspn
  learner (``refit``): each cluster's circuit is the client's circuit of all its rows, its
  parameters re-estimated by ``CLUSTER_EM_PASSES`` EM passes over the cluster's rows (every
  leaf's statistics resting on at least the policy's ``min_rows`` rows), instead of a structure
  learned on the cluster's rows alone (``learn``, the paper's, kept for random and combinatorial
  gluing and the other learners). A cluster holds a 32nd of a client's rows, too few for
  LearnSPN to find much structure in; the client's rows as a whole do. Over the 45 tables of
  docs/real_tables.md, test LL below centralized, median, learn -> refit (better / worse by
  more than half a point, of 45): vertical x3 4.05% -> 2.41% (15 / 9), x8 -1.32% -> -1.34%
  (6 / 6), hybrid x3 6.79% -> 6.97% (6 / 6), x8 2.66% -> 2.98% (2 / 6); fits below the plain
  product 1 -> 0 (modeldata/attrition vertical x3); 2 passes, or the marginal of the cluster's
  rows for a node below the floor, did worse (docs/real_tables.md). Critical path at 3 clients
  against the centralized fit, median: vertical 3.50x -> 3.81x, hybrid 2.04x -> 1.81x (fits
  above 1.5x: 44 -> 44 and 37 -> 32).
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
CLUSTER_EM_PASSES = 4  # refitted cluster circuits' EM passes (2 passes: module doc)
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


def cluster_fit(requested: str, glue: str, learner: str) -> str:
    """How a client fits its cluster circuits: ``requested``, or for ``auto`` refit where the
    gluing is aligned and the learner learnspn, else learn (module doc); learn for a dense
    learner (its circuits are trained by epochs, not refitted by EM here)."""
    if learner_spec(learner).dense:
        return "learn"
    if requested != "auto":
        return requested
    return "refit" if glue == "aligned" and learner == "learnspn" else "learn"


def clusters(glue: str) -> int:
    """The auto number of clusters per single-client subspace for gluing ``glue``."""
    return ALIGNED_CLUSTERS if glue == "aligned" else 1


def resolve(params: dict, rows: int, floor: int = 1) -> dict:
    """``params`` with an auto (None) ``min_instances_slice`` resolved for a circuit learned on
    ``rows`` rows, at least ``floor`` (a client's policy)."""
    if params.get("min_instances_slice", 0) is not None:
        return params
    return {**params, "min_instances_slice": max(floor, min_instances(rows))}
