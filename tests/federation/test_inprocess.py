import numpy as np
import pytest

from fedpgm.data import load_dataset, partition
from fedpgm.errors import FedpgmError
from fedpgm.federation import ClientFailed, InProcessFederation, PrivacyAudit
from fedpgm.federation.reference import federated_moments

DIAG = "fedpgm.federation.diagnostics:HANDLERS"
REF = "fedpgm.federation.reference:HANDLERS"


@pytest.fixture(scope="module")
def cancer_parts():
    ds = load_dataset("breast_cancer", seed=0)
    return ds, partition(ds, "horizontal", 3, seed=0, scheme="label-skew")


@pytest.mark.parametrize("mode", ["sequential", "processes"])
def test_reference_moments_equal_pooled_pandas(cancer_parts, mode):
    ds, part = cancer_parts
    audit = PrivacyAudit(part)
    with InProcessFederation(part, REF, mode=mode, audit=audit) as fed:
        res = federated_moments(fed)
    pooled = ds.train[res["columns"]]
    assert res["n"] == len(ds.train) and res["clients"] == ["client-0", "client-1", "client-2"]
    np.testing.assert_allclose(res["mean"], pooled.mean().to_numpy(), rtol=1e-12)
    np.testing.assert_allclose(res["cov"], pooled.cov().to_numpy(), rtol=1e-9, atol=1e-12)
    comm = res["communication"]
    assert comm["messages"] == 12 and comm["rounds"] == 2  # 3 clients x 2 rounds x 2 directions
    d = len(res["columns"])
    assert comm["bytes_by_message"]["moments"] > 3 * 8 * (d * d + d + 1)  # the statistics, really sent
    assert audit.checked == 6


def test_both_modes_give_identical_results_and_bytes(cancer_parts):
    _, part = cancer_parts
    out = []
    for mode in ("sequential", "processes"):
        with InProcessFederation(part, REF, mode=mode) as fed:
            out.append(federated_moments(fed))
    assert out[0]["mean"] == out[1]["mean"] and out[0]["cov"] == out[1]["cov"]
    assert out[0]["communication"] == out[1]["communication"]


def test_state_survives_messages_and_replies_are_copies(cancer_parts):
    _, part = cancer_parts
    with InProcessFederation(part, DIAG, mode="processes") as fed:
        fed.broadcast("remember", config={"value": 2})
        r = fed.broadcast("remember", config={"value": 5})
        assert {m.config["count"] for m in r.messages.values()} == {7}
        x = np.arange(4.0)
        echo = fed.send("client-1", "echo", {"x": x}).require_all()["client-1"]
        assert echo.config["client"] == "client-1"
        np.testing.assert_array_equal(echo["x"], x)
        assert not np.shares_memory(echo["x"], x)


def test_handler_error_is_typed_and_others_continue(cancer_parts):
    _, part = cancer_parts
    with InProcessFederation(part, DIAG, mode="processes") as fed:
        per = {"client-1": ({}, {"reason": "disk full"})}
        r = fed.broadcast("fail", clients=["client-1"], per_client=per)
        f = r.failures["client-1"]
        assert f.kind == "error" and "disk full" in f.detail and f.message == "fail"
        with pytest.raises(ClientFailed, match="client 'client-1' failed on 'fail'"):
            r.require_all()
        # the failing client is still there for the next round
        assert len(fed.broadcast("echo").messages) == 3


def test_unknown_message_name_and_unknown_client(cancer_parts):
    _, part = cancer_parts
    with InProcessFederation(part, DIAG, mode="sequential") as fed:
        r = fed.broadcast("nosuch")
        assert all(f.kind == "error" and "unknown message 'nosuch'" in f.detail for f in r.failures.values())
        with pytest.raises(FedpgmError, match=r"unknown client\(s\) \['client-9'\]"):
            fed.send("client-9", "echo")


@pytest.mark.timing
def test_timeout_does_not_hang_and_names_the_client(cancer_parts):
    _, part = cancer_parts
    with InProcessFederation(part, DIAG, mode="processes") as fed:
        per = {"client-2": ({}, {"seconds": 30})}
        r = fed.broadcast("sleep", per_client=per, config={"seconds": 0.0}, timeout=2.0)
        assert set(r.messages) == {"client-0", "client-1"}
        assert r.failures["client-2"].kind == "timeout"
        assert fed.clients == ["client-0", "client-1"]  # dropped, its process stopped
        assert not fed.workers["client-2"].process.is_alive()


def test_crashed_client_is_unavailable_and_algorithm_goes_on(cancer_parts):
    ds, part = cancer_parts
    with InProcessFederation(part, DIAG, mode="processes") as fed:
        r = fed.broadcast("crash", clients=["client-0"])
        assert r.failures["client-0"].kind == "unavailable"
        assert fed.clients == ["client-1", "client-2"]
        r = fed.broadcast("echo", clients=["client-0", "client-1"])
        assert r.failures["client-0"].kind == "unavailable" and "client-1" in r.messages
    with InProcessFederation(part, REF, mode="processes") as fed:
        fed.kill("client-2")
        res = federated_moments(fed)
    assert res["clients"] == ["client-0", "client-1"] and "client-2" in res["failed"]
    rows = ds.train.loc[part["client-0"].train.index.union(part["client-1"].train.index)]
    np.testing.assert_allclose(res["mean"], rows[res["columns"]].mean().to_numpy(), rtol=1e-12)


def test_close_stops_every_worker(cancer_parts):
    _, part = cancer_parts
    fed = InProcessFederation(part, DIAG, mode="processes")
    procs = [w.process for w in fed.workers.values()]
    fed.close()
    assert all(not p.is_alive() for p in procs)
    assert not fed.workdir.exists()


def test_bad_construction(cancer_parts):
    _, part = cancer_parts
    with pytest.raises(FedpgmError, match="unknown mode"):
        InProcessFederation(part, DIAG, mode="threads")
    with pytest.raises(FedpgmError, match="cannot load handlers"):
        InProcessFederation(part, "fedpgm.nope:HANDLERS")
    with pytest.raises(FedpgmError, match="at least one client"):
        InProcessFederation([], DIAG)


def test_state_must_be_arrays_or_json(cancer_parts):
    from fedpgm.federation.codec import Message
    from fedpgm.federation.contract import NOTHING
    from fedpgm.federation.handlers import HandlerSet

    hs = HandlerSet("bad")

    @hs.train("keep", NOTHING)
    def keep(request, ctx):
        ctx.state["model"] = object()
        return Message("keep")

    _, part = cancer_parts
    with InProcessFederation(part, hs, mode="sequential") as fed:
        r = fed.broadcast("keep")
    assert all("keep arrays or JSON values in state" in f.detail for f in r.failures.values())


def test_memo_computes_once_per_key_and_is_never_saved(cancer_parts, tmp_path):
    from fedpgm.federation.handlers import ClientContext, load_state, save_state

    _, part = cancer_parts
    ctx = ClientContext("client-0", part.clients[0], tmp_path)
    calls = []
    first = ctx.memo("rows", lambda: calls.append(1) or object())  # any object: the cache is not state
    assert ctx.memo("rows", lambda: calls.append(1) or object()) is first and len(calls) == 1
    ctx.memo("other", lambda: calls.append(1) or 2)
    assert len(calls) == 2
    ctx.state["n"] = 3
    ctx.check_state()  # cached objects do not make the state unsavable
    save_state(ctx.state, tmp_path)
    assert load_state(tmp_path) == {"n": 3}


def test_a_federation_that_fails_to_start_leaves_no_folder(tmp_path, monkeypatch):
    import tempfile

    from fedpgm.data import load_dataset, partition
    from fedpgm.errors import FedpgmError
    from fedpgm.federation import InProcessFederation
    from fedpgm.federation.diagnostics import HANDLERS

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    part = partition(load_dataset("wine"), "horizontal", 2, seed=0)
    for handlers, mode, message in (("no.such.module:HANDLERS", "processes", "cannot load handlers"),
                                    ("no.such.module:HANDLERS", "sequential", "cannot load handlers"),
                                    (HANDLERS, "processes", "needs handlers as 'package.module:NAME'")):
        with pytest.raises(FedpgmError, match=message):
            InProcessFederation(part, handlers, mode=mode)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_workers_started_without_fork_give_the_same_result(cancer_parts, method):
    """Where ``fork`` is missing (macOS's default, Windows) workers start by forkserver or spawn."""
    _, part = cancer_parts
    with InProcessFederation(part, REF, mode="sequential") as fed:
        reference = federated_moments(fed)
    with InProcessFederation(part, REF, start_method=method) as fed:
        kinds = {type(w.process).__name__ for w in fed.workers.values()}
        assert kinds == {{"forkserver": "ForkServerProcess", "spawn": "SpawnProcess"}[method]}
        res = federated_moments(fed)
    np.testing.assert_array_equal(res["mean"], reference["mean"])
    assert res["communication"] == reference["communication"]
    with pytest.raises(FedpgmError, match="start method 'threads' is not available here; use one of"):
        InProcessFederation(part, REF, start_method="threads")
