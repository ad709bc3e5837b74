"""A client's own privacy policy: floors that no server request can lower.

Each client holds one ``ClientPolicy`` with its data (``ClientData.policy``; on Flower, from its
node config, see ``from_node_config``). The runtime applies it to every message before any
handler runs and before any reply leaves (``HandlerSet.handle``), so every algorithm family gets
it without code of its own:

- ``families``: the algorithm families (``HandlerSet`` names: fedpc, ngm, concepts, fedavg,
  splitnn, moments, diagnostics, naive_bayes) the client serves; a request for another is
  refused. None (the default): every family except SplitNN, a baseline that sends per-row values
  (``OPT_IN``), which a client serves only where its policy names it.
- ``min_rows`` (default 10): the fewest rows behind any statistic the client sends: a circuit
  leaf, a k-means cluster, a tree leaf, a mean. Handlers raise a server's smaller setting to it
  (``ctx.floor``) and say so in the reply (``config["policy"]``), or refuse where raising is not
  possible (a cluster with fewer rows).
- ``max_epsilon`` / ``max_delta``: the differential privacy the client insists on where an
  algorithm trains under DP (F-CMs): a request without DP is refused, a larger epsilon or delta
  is lowered to the client's, and training stops once the client's budget is spent (on a Flower
  node, over all its runs: ``fedpgm.federation.spending``). A request that computes on a model
  it is sent without DP (FedAvg's training, FedPC's EM statistics: ``Contract.sent_model``) is
  refused outright.
- ``max_requests`` (default 10,000): the requests the client answers in one run (a run's state is
  its own); past it every request is refused, which bounds what repeated questions can extract.
- ``require_secure_aggregation`` (default off): model updates leave only as shares of a secure
  sum (SecAgg+) over at least ``min_cohort`` clients, each F-CM module it trains trained by at
  least ``min_cohort`` of them; a plain training request is refused.
- ``secure_whole_roster`` (default off): a secure sum must have every party of the roster as a
  member, so every sum the client adds to has the same members and no two sums of different
  members can be differenced down to one member's vector (docs/security.md); the price: a sum
  waits for every party, and a party that drops out fails it.
- ``memberships`` (default on): FedPC's aligned gluing may use the client's clusters (its row
  tokens, and once per run its cluster indices masked so that only their sum over the parties is
  readable: docs/security.md); off, such a request is refused and ``auto`` gluing is random.
- ``em`` (default: in-process only): FedPC's EM refinement may ask the client for EM's
  statistics of its rows under a circuit the coordinator sends (``fedpc.client.em``; floored,
  but a crafted circuit can difference them: docs/security.md). None answers where the
  coordinator is this user's own process (in-process runs, Flower's Simulation Runtime) and
  refuses on a deployed SuperNode; true answers there too; false never.
- ``audit`` (default on): the privacy audit (``fedpgm.federation.privacy``) checks every reply
  against the client's own table before it leaves; a reply that carries rows is refused.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

from fedpgm.errors import FedpgmError

FAMILIES = ("fedpc", "ngm", "concepts", "fedavg", "splitnn", "moments", "diagnostics", "naive_bayes")
OPT_IN = ("splitnn",)  # families that send per-row values (SplitNN: labels, embeddings): served only if named
NODE_CONFIG_KEY = "policy"  # node config: policy='{"min_rows": 20, "families": ["fedpc"]}'


class PolicyRefusal(FedpgmError):
    """A request that the client's policy does not allow."""


@dataclass(frozen=True)
class ClientPolicy:
    """What a client agrees to send, enforced by the client itself: at least ``min_rows`` rows
    behind every statistic, the algorithm families it serves, the DP it insists on, and the
    privacy audit of every reply. A server's request never lowers it."""
    min_rows: int = 10
    families: tuple[str, ...] | None = None  # None: every family
    max_epsilon: float | None = None  # None: DP not required
    max_delta: float = 1e-5
    audit: bool = True
    max_requests: int = 10_000
    require_secure_aggregation: bool = False
    min_cohort: int = 2  # clients a secure sum must have for this client to add to it
    max_psi_ids: int = 10_000_000  # ids another party's PSI request may hold
    memberships: bool = True  # FedPC aligned gluing: masked cluster indices (their sum: a histogram)
    secure_whole_roster: bool = False  # a secure sum's members: every party of the roster
    em: bool | None = None  # FedPC's EM statistics of a circuit it is sent (None: not on a deployed node)

    def __post_init__(self) -> None:
        if isinstance(self.min_rows, bool) or not isinstance(self.min_rows, int) or self.min_rows < 1:
            raise FedpgmError(f"policy min_rows must be an integer >= 1, got {self.min_rows!r}")
        if self.families is not None:
            object.__setattr__(self, "families", tuple(self.families))
            unknown = [f for f in self.families if f not in FAMILIES]
            if unknown:
                raise FedpgmError(f"policy families {unknown} are unknown; use some of {', '.join(FAMILIES)}")
        if self.max_epsilon is not None and not self.max_epsilon > 0:
            raise FedpgmError(f"policy max_epsilon must be > 0, got {self.max_epsilon!r}")
        if not 0 < self.max_delta < 1:
            raise FedpgmError(f"policy max_delta must lie in (0, 1), got {self.max_delta!r}")
        for name in ("audit", "require_secure_aggregation", "memberships", "secure_whole_roster"):
            if not isinstance(getattr(self, name), bool):
                raise FedpgmError(f"policy {name} must be true or false, got {getattr(self, name)!r}")
        if self.em is not None and not isinstance(self.em, bool):
            raise FedpgmError(f"policy em must be true, false or null, got {self.em!r}")
        for name, least in (("max_requests", 1), ("min_cohort", 2), ("max_psi_ids", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise FedpgmError(f"policy {name} must be an integer >= {least}, got {value!r}")

    @classmethod
    def from_dict(cls, doc: dict) -> "ClientPolicy":
        if not isinstance(doc, dict):
            raise FedpgmError(f"a client policy is a JSON object, got {type(doc).__name__}")
        keys = [f.name for f in fields(cls)]
        unknown = sorted(set(doc) - set(keys))
        if unknown:
            raise FedpgmError(f"unknown policy key(s) {unknown}; use {', '.join(keys)}")
        return cls(**doc)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["families"] = None if self.families is None else list(self.families)
        return out

    @classmethod
    def from_node_config(cls, node_config) -> "ClientPolicy":
        """The node config's ``policy`` (a JSON object), or the defaults."""
        text = node_config.get(NODE_CONFIG_KEY)
        if text is None:
            return cls()
        try:
            return cls.from_dict(json.loads(str(text)))
        except json.JSONDecodeError as e:
            raise FedpgmError(f"node config 'policy' is not a JSON object ({e})") from None

    def check_family(self, family: str, client: str) -> None:
        if self.families is None and family in OPT_IN:
            raise PolicyRefusal(f"client '{client}' serves '{family}' only where its policy names it (families): "
                                f"it sends per-row values; see docs/security.md")
        if self.families is not None and family not in self.families:
            raise PolicyRefusal(f"client '{client}' does not serve '{family}' (its policy allows "
                                f"{', '.join(self.families) or 'nothing'})")

    def dp(self, requested: dict | None, client: str) -> tuple[dict | None, list[str]]:
        """The DP settings this client trains with, given the server's (``epsilon``, ``delta``, ...):
        lowered to the policy's; refused if the policy requires DP and the request has none."""
        if self.max_epsilon is None:
            return requested, []
        if not requested:
            raise PolicyRefusal(f"client '{client}' trains only under differential privacy with "
                                f"epsilon <= {self.max_epsilon}; rerun with --dp-epsilon {self.max_epsilon}")
        out, notes = dict(requested), []
        if out["epsilon"] > self.max_epsilon:
            notes.append(f"epsilon lowered from {out['epsilon']} to {self.max_epsilon} by the client's policy")
            out["epsilon"] = self.max_epsilon
        if out.get("delta", self.max_delta) > self.max_delta:
            notes.append(f"delta lowered from {out['delta']} to {self.max_delta} by the client's policy")
            out["delta"] = self.max_delta
        return out, notes
