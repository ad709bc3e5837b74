"""Private row alignment (PSI): the exact intersection, no id in any message, the fit on aligned
rows equals the fit on pre-aligned rows, and one-line errors for parties that cannot align."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pytest

from fedpgm.data.partition import ClientData, Partition, partition
from fedpgm.data.registry import load_dataset
from fedpgm.data.schema import ROW_ID, Feature, Schema
from fedpgm.errors import FedpgmError
from fedpgm.federation import InProcessFederation, align_rows
from fedpgm.federation.contract import NOTHING
from fedpgm.federation.handlers import ALIGNED, HandlerSet
from fedpgm.fedpc.server import fit_fedpc

FEDPC = "fedpgm.fedpc.client:HANDLERS"
ECHO = HandlerSet("echo")


@ECHO.query("rows", NOTHING)
def rows(request, ctx):
    """The ids of the rows this client now works on (a test-only leak, never a real handler)."""
    from fedpgm.federation.codec import Message
    return Message("rows", config={"ids": [str(v) for v in ctx.data.train.index]})


class Recording(InProcessFederation):
    """Keeps every request and reply as the bytes that crossed the boundary."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.wire: list[bytes] = []

    def _exchange(self, requests, names, timeout):
        self.wire.extend(bytes(r) for r in requests.values())
        out = super()._exchange(requests, names, timeout)
        self.wire.extend(bytes(o) for o in out.values() if isinstance(o, (bytes, bytearray, np.ndarray)))
        return out


def three_parties(ids: np.ndarray, overlap: float = 0.8, seed: int = 0) -> tuple[Partition, set]:
    """Three parties, one column each: a common block of ``overlap`` of ``ids`` and a block of their
    own; returns the partition and the true intersection."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(ids)
    n_common = int(overlap * len(ids))
    common, rest = perm[:n_common], np.array_split(perm[n_common:], 3)
    schema = Schema(tuple(Feature(f"x{i}", "continuous") for i in range(3)))
    parts = []
    for i in range(3):
        held = rng.permutation(np.concatenate([common, rest[i]]))  # each party in its own order
        frame = pd.DataFrame({f"x{i}": rng.normal(size=len(held))},
                             index=pd.Index(held, name=ROW_ID))
        parts.append(ClientData(f"client-{i}", schema.select([f"x{i}"]), frame))
    return Partition("vertical", schema, parts), set(common.tolist())


@pytest.mark.parametrize("kind", ["number", "text"])
def test_three_parties_get_exactly_the_intersection_and_no_id_crosses(kind):
    rng = np.random.default_rng(1)
    numbers = rng.integers(10**12, 2**62, size=600)
    ids = numbers if kind == "number" else np.array([f"MRN-{v:x}" for v in numbers], dtype=object)
    part, truth = three_parties(ids)
    with Recording(part, ECHO, mode="sequential") as fed:
        report = align_rows(fed)
        wire = list(fed.wire)
        after = fed.broadcast("rows").require_all()
    assert report["intersection"] == len(truth) == 480
    assert report["party_ids"] == {"client-0": 520, "client-1": 520, "client-2": 520}
    expected = sorted(truth, key=lambda v: v)  # the agreed order: the ids' natural order
    for c, msg in after.items():
        assert msg.config["ids"] == [str(v) for v in expected], c
    assert report["messages"] == 16 and report["bytes"] == sum(len(w) for w in wire)
    # no message carries an id: neither as text nor as an 8-byte integer, inside or outside I
    blob = b"".join(wire)
    for v in numbers[:200]:
        assert int(v).to_bytes(8, "little") not in blob
        assert str(v).encode() not in blob
        assert f"{v:x}".encode() not in blob


def test_fedpc_with_psi_equals_the_fit_on_prealigned_rows():
    ds = load_dataset("breast_cancer")
    part = partition(ds, "vertical", 3, 0, overlap=0.8)
    held = [set(c.train.index) for c in part.clients]
    assert len({len(h) for h in held} | {len(set.union(*held))}) > 1  # the id sets differ
    common = sorted(set.intersection(*held))
    pre = Partition("vertical", part.schema,
                    [ClientData(c.client_id, c.schema, c.train.loc[common]) for c in part.clients])
    fit = dict(glue_how="combinatorial", params={"min_instances_slice": 50})
    with pytest.raises(FedpgmError, match="do not align.*--align psi"):
        with InProcessFederation(part, FEDPC) as fed:
            fit_fedpc(fed, **fit)
    with InProcessFederation(part, FEDPC, mode="sequential") as fed:
        aligned = fit_fedpc(fed, align="psi", **fit)
        kept = [len(fed.contexts[c].state[ALIGNED]) for c in fed.clients]
    with InProcessFederation(pre, FEDPC) as fed:
        reference = fit_fedpc(fed, **fit)
    assert aligned.info["alignment"]["intersection"] == len(common) == 364
    assert aligned.info["alignment"]["bytes"] > 0
    a, b = aligned.log_likelihood(ds.test), reference.log_likelihood(ds.test)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-9)
    assert kept == [364, 364, 364]


def test_empty_intersection_names_the_party():
    part, _ = three_parties(np.arange(1000, 1300))
    disjoint = part.clients[2]
    disjoint.train.index = pd.Index(disjoint.train.index + 10**6, name=ROW_ID)
    with InProcessFederation(part, FEDPC, mode="sequential") as fed:
        with pytest.raises(FedpgmError, match=r"no row id in common \(client\(s\) \['client-2'\]"):
            align_rows(fed)


def test_a_party_without_ids_or_with_other_id_types_is_refused(tmp_path):
    part, _ = three_parties(np.arange(1000, 1300))
    part.clients[1].train.index.name = None  # as read from a CSV without a row_id column
    with InProcessFederation(part, FEDPC, mode="sequential") as fed:
        with pytest.raises(FedpgmError, match="client 'client-1' holds no row_id column"):
            align_rows(fed)
    part, _ = three_parties(np.arange(1000, 1300))
    c = part.clients[2]
    c.train.index = pd.Index([str(v) for v in c.train.index], name=ROW_ID, dtype=object)
    with InProcessFederation(part, FEDPC, mode="sequential") as fed:
        with pytest.raises(FedpgmError, match=r"\['client-2'\] hold text row ids where 'client-0' holds number"):
            align_rows(fed)


def test_a_csv_without_row_id_is_a_party_without_ids(tmp_path):
    from fedpgm.data.partition import load_client_csv

    schema = Schema((Feature("a", "continuous"),))
    (tmp_path / "noid.csv").write_text("a\n1.5\n2.5\n")
    (tmp_path / "ids.csv").write_text("row_id,a\n7,1.5\n9,2.5\n")
    assert load_client_csv(tmp_path / "noid.csv", "c", schema).index.name is None
    assert load_client_csv(tmp_path / "ids.csv", "c", schema).index.tolist() == [7, 9]


def test_missing_library_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "private_set_intersection", None)
    monkeypatch.setitem(sys.modules, "private_set_intersection.python", None)
    part, _ = three_parties(np.arange(100))
    with InProcessFederation(part, FEDPC, mode="sequential") as fed:
        with pytest.raises(FedpgmError, match="pip install --no-deps openmined-psi==2.0.6"):
            align_rows(fed)
        assert fed.ledger.entries == []  # refused before any client was asked


def test_vertical_overlap_partition():
    ds = load_dataset("breast_cancer")
    part = partition(ds, "vertical", 3, 0, overlap=0.8)
    n = len(ds.train)
    common = set.intersection(*[set(c.train.index) for c in part.clients])
    assert len(common) == round(0.8 * n)
    assert set.union(*[set(c.train.index) for c in part.clients]) == set(ds.train.index)
    assert sum(len(c.train) for c in part.clients) == 3 * len(common) + (n - len(common))
    full = partition(ds, "vertical", 3, 0)
    assert all(len(c.train) == n for c in full.clients)
    with pytest.raises(FedpgmError, match=r"overlap must lie in \(0, 1\]"):
        partition(ds, "vertical", 3, 0, overlap=0.0)
