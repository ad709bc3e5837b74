"""End to end on a real loopback deployment: a SuperLink and 3 SuperNodes on 127.0.0.1."""

import importlib.util
import os
import socket
import time
from pathlib import Path

import numpy as np
import pytest

from fedpgm.data import load_dataset, partition
from fedpgm.errors import FedpgmError
from fedpgm.federation import InProcessFederation
from fedpgm.federation import deploy
from fedpgm.federation.deploy import LoopbackDeployment, group_alive
from fedpgm.federation.ports import free_port, port_open
from fedpgm.federation.flower import result_from_log
from fedpgm.federation.reference import federated_moments

REF_PROC = "fedpgm.federation.reference:federated_moments"
REF = "fedpgm.federation.reference:HANDLERS"
NO_RAY = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                            reason="Ray (pip install 'fedpgm[simulation]') is not installed")


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    ds = load_dataset("breast_cancer", seed=0)
    part = partition(ds, "horizontal", 3, seed=0, scheme="label-skew")
    folder = tmp_path_factory.mktemp("parts") / "cancer"
    part.write(folder)
    return part, folder


def assert_all_stopped(pids):
    deadline = time.monotonic() + 15
    while any(group_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in pids if group_alive(p)], "processes left behind"


@pytest.mark.slow
def test_reference_on_flower_equals_in_process(parts, tmp_path):
    part, folder = parts
    with InProcessFederation(part, REF, mode="processes") as fed:
        local = federated_moments(fed)
    with LoopbackDeployment(folder, workdir=tmp_path / "dep") as dep:
        pids = dep.pids
        assert len(pids) == 4
        remote = dep.run(REF_PROC, REF, timeout=240)
        streamed = dep.runs[-1].output()  # what `flwr run --stream` showed whoever started the run
    assert_all_stopped(pids)
    assert result_from_log(streamed) == remote  # the result reaches the caller, not only a file
    assert remote["backend"] == "flower" and remote["clients"] == local["clients"]
    np.testing.assert_allclose(remote["mean"], local["mean"], rtol=1e-12)
    np.testing.assert_allclose(remote["cov"], local["cov"], rtol=1e-12)
    assert remote["communication"] == local["communication"]  # same codec, same bytes


@pytest.mark.slow
@NO_RAY
def test_reference_on_the_simulation_runtime_equals_in_process(parts, tmp_path):
    """`flwr run` on a SuperLink in simulation mode (Ray): the in-process numbers, and no process
    of the SuperLink, flower-superexec, flwr-simulation or Ray outlives the deployment."""
    part, folder = parts
    with InProcessFederation(part, REF, mode="sequential") as fed:
        local = federated_moments(fed)
    with LoopbackDeployment(folder, workdir=tmp_path / "dep", simulation=True) as dep:
        assert "--simulation" in dep.superlink.args and not dep.nodes
        remote = dep.run("moments", "moments", timeout=240)
        helpers = deploy.descendant_groups(dep.pids) - set(dep.pids)
        assert any(dep.ray_tmp.rglob("session_*"))  # Ray's session folder is the deployment's ...
    assert_all_stopped(dep.pids + sorted(helpers))
    assert not dep.ray_tmp.exists()  # ... and goes with it
    assert remote["backend"] == "simulation" and remote["clients"] == local["clients"]
    np.testing.assert_allclose(remote["mean"], local["mean"], rtol=1e-12)
    assert remote["communication"] == local["communication"]


@NO_RAY
def test_simulated_nodes_hold_the_parties_identities(parts, tmp_path):
    """Under the Simulation Runtime each simulated node gets its party's identity key and the
    roster (what PSI and aligned gluing need): one party's signature verifies at another."""
    from fedpgm.federation.flower import simulated_node_config
    from fedpgm.federation.identity import Identity

    part, folder = parts
    dep = LoopbackDeployment(folder, workdir=tmp_path / "dep", simulation=True)
    keys = Path(dep.identity_files("client-0")["identity"]).parent
    config = {"simulation-partition": str(folder), "simulation-workdir": str(tmp_path / "sim"),
              "simulation-identity": str(keys)}
    nodes = [simulated_node_config(i, config) for i in range(len(part.clients))]
    parties = [Identity.load(n["client-id"], n["identity"], n["roster"]) for n in nodes]
    assert [p.client_id for p in parties] == [c.client_id for c in part.clients]
    parties[1].verify("client-0", parties[0].sign("hello", "client-1"), "hello", "client-1")
    assert "identity" not in simulated_node_config(0, {**config, "simulation-identity": ""})


def test_each_supernode_reads_a_manifest_of_its_own_part_only(parts, tmp_path):
    import json

    part, folder = parts
    dep = LoopbackDeployment(folder, workdir=tmp_path / "dep")
    for c in part.clients:
        doc = json.loads(dep.node_manifest(c.client_id, tmp_path).read_text())
        assert [e["id"] for e in doc["clients"]] == [c.client_id]
        assert doc["clients"][0]["train_rows"] == sorted(int(i) for i in c.train.index)
        assert [f["name"] for f in doc["schema"]["features"]] == c.schema.names


@pytest.mark.slow
def test_killed_supernode_is_reported_and_the_run_finishes(parts, tmp_path):
    part, folder = parts
    with LoopbackDeployment(folder, workdir=tmp_path / "dep") as dep:
        pids = dep.pids
        run = dep.submit(REF_PROC, REF, args={"pause_s": 8}, timeout=240)
        deadline = time.monotonic() + 180
        while "describe: 3 replies" not in run.output():
            assert time.monotonic() < deadline, run.output()[-2000:]
            time.sleep(0.2)
        dep.kill_node("client-2")
        result = run.result(240)
    assert_all_stopped(pids)
    assert result["clients"] == ["client-0", "client-1"]
    assert "Node Unavailable" in result["failed"]["client-2"]
    assert result["n"] == len(part["client-0"].train) + len(part["client-1"].train)


def test_port_in_use_and_unknown_client(parts):
    _, folder = parts
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(FedpgmError, match=f"port {port} on 127.0.0.1 is in use"):
            LoopbackDeployment(folder, port=port)
    with pytest.raises(FedpgmError, match=r"no client\(s\) \['client-7'\]"):
        LoopbackDeployment(folder, clients=["client-7"])
    with pytest.raises(FedpgmError, match="has no manifest.json"):
        LoopbackDeployment(os.path.dirname(folder))


@pytest.mark.slow
def test_superlink_and_supernode_whose_port_was_taken_start_again_on_another(parts, tmp_path, monkeypatch):
    _, folder = parts
    with socket.socket() as taken:  # bound, not listening: as an outgoing connection holds a port
        taken.bind(("127.0.0.1", free_port()))
        port = taken.getsockname()[1]
        real = deploy.free_port
        ports = iter([port, real(), port])  # the SuperLink's first two, then the SuperNode's first
        monkeypatch.setattr(deploy, "free_port", lambda: next(ports, None) or real())
        with LoopbackDeployment(folder, workdir=tmp_path / "dep", clients=["client-0"]) as dep:
            node = dep.nodes["client-0"]
            assert dep.link_port == dep.port != port and port_open(dep.link_port)
            assert node.port != port and node.process.poll() is None and port_open(node.port)
            assert next(ports, None) is None  # (all three taken: each process was started twice)
            pids = dep.pids
    assert_all_stopped(pids)



def test_node_state_is_kept_per_run(parts, tmp_path):
    """Two runs on the same SuperNode (same node config) never see each other's state, and a run's
    next message sees its own: the context the ClientApp builds around each handler."""
    from flwr.app import Context, RecordDict

    from fedpgm.federation.codec import Message
    from fedpgm.federation.diagnostics import HANDLERS
    from fedpgm.federation.flower import node_context
    from fedpgm.federation.handlers import save_state

    _, folder = parts
    config = {"client-id": "client-0", "data": str(folder / "client-0.csv"),
              "schema": str(folder / "manifest.json"), "workdir": str(tmp_path / "node")}

    def remember(run_id: int, value: int) -> int:
        ctx = node_context(Context(run_id=run_id, node_id=1, node_config=config, state=RecordDict(), run_config={}))
        reply = HANDLERS.handle(Message("remember", config={"value": value}), ctx)
        save_state(ctx.state, ctx.workdir)
        return reply.config["count"]

    assert remember(7, 5) == 5 and remember(8, 100) == 100  # two runs, each from zero
    assert remember(7, 1) == 6 and remember(8, 1) == 101  # each continues its own
    assert sorted(p.name for p in (tmp_path / "node").iterdir()) == ["run-7", "run-8"]


def test_messages_travel_as_native_records_and_come_back_byte_identical():
    from flwr.app import ArrayRecord, ConfigRecord, RecordDict

    from fedpgm.federation.codec import CodecError, Message, encode
    from fedpgm.federation.flower import ARRAYS, CONFIG, from_record, to_record

    msg = Message("fit", {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "ids": np.array([3, 1], np.int64),
                          "flag": np.array(True)}, {"rounds": 3, "lr": 0.001, "nested": {"a": [1, 2.5, "x"]}})
    data = bytes(encode(msg))
    record = to_record(data)
    assert sorted(record[ARRAYS]) == ["flag", "ids", "w"]  # each array a native Array, visible to mods
    np.testing.assert_array_equal(record[ARRAYS]["w"].numpy(), msg.arrays["w"])
    assert record[CONFIG]["name"] == "fit"
    assert from_record(record) == data  # the ledger counts the same bytes as in-process
    with pytest.raises(CodecError, match="without readable fedpgm records"):
        from_record(RecordDict({"other": ConfigRecord({"x": 1})}))
    bad = RecordDict({ARRAYS: ArrayRecord({}), CONFIG: ConfigRecord({"name": "fit", "config": '{"a": NaN}'})})
    with pytest.raises(CodecError):
        from_record(bad)


def test_a_node_allow_list_in_node_config_refuses_other_families(parts, tmp_path):
    """What a SuperNode's operator sets (node config ``policy``) is what its ClientApp enforces."""
    import json

    from flwr.app import Context, RecordDict

    from fedpgm.data.policy import PolicyRefusal
    from fedpgm.federation.codec import Message
    from fedpgm.federation.flower import node_context
    from fedpgm.federation.reference import HANDLERS as MOMENTS
    from fedpgm.fedpc.client import HANDLERS as FEDPC

    _, folder = parts
    config = {"client-id": "client-0", "data": str(folder / "client-0.csv"), "schema": str(folder / "manifest.json"),
              "workdir": str(tmp_path / "node"), "policy": json.dumps({"families": ["moments"]})}
    ctx = node_context(Context(run_id=1, node_id=1, node_config=config, state=RecordDict(), run_config={}))
    with pytest.raises(PolicyRefusal, match="client 'client-0' does not serve 'fedpc' .*allows moments"):
        FEDPC.handle(Message("describe"), ctx)
    assert MOMENTS.handle(Message("describe"), ctx).config  # the family it serves answers


NODE_PROCESS = """
import json, sys
from flwr.app import Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity
TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = 7, 0, 1  # as inside a ClientApp process
from fedpgm.federation.codec import Message as Request, decode, encode
from fedpgm.federation.flower import client_app, from_record, to_record
heavy = lambda: sorted(m for m in ("torch", "sklearn", "pgmpy", "opacus", "scipy.stats") if m in sys.modules)
out = {"on_import": heavy()}
config = json.loads(sys.argv[1])
ctx = Context(run_id=7, node_id=1, node_config=config, state=RecordDict(), run_config={"handlers": "moments"})
ask = lambda kind: Message(to_record(bytes(encode(Request(kind.split(".")[1])))), dst_node_id=1, message_type=kind)
out["describe"] = decode(from_record(client_app(ask("query.describe"), ctx).content)).config
try:
    client_app(ask("train.fit"), ctx)  # a route of another family (fedpc's)
except ValueError as e:
    out["other_family"] = str(e)
out["after"] = heavy()
print(json.dumps(out))
"""


def test_a_node_process_imports_only_the_family_its_run_names(parts, tmp_path):
    """Flower starts a process per message: the ClientApp module loads no torch, scikit-learn,
    pgmpy or opacus, a run of the moments family answers without them, and a route of another
    family (fedpc's ``train.fit``) is not served in that run."""
    import json
    import subprocess
    import sys

    part, folder = parts
    config = {"client-id": "client-0", "data": str(folder / "client-0.csv"), "schema": str(folder / "manifest.json"),
              "workdir": str(tmp_path / "node")}
    done = subprocess.run([sys.executable, "-c", NODE_PROCESS, json.dumps(config)], capture_output=True, text=True,
                          timeout=120, check=True)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["on_import"] == [] and out["after"] == []
    assert out["describe"]["n_rows"] == len(part["client-0"].train)
    assert out["other_family"] == "No train function registered with name 'fit'"


HELLO_PROCESS = """
import json, sys
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity
TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = 7, 0, 1  # as inside a ClientApp process
from fedpgm.federation.flower import HELLO, client_app
from fedpgm.federation.codec import Message as Request, decode, encode
from fedpgm.federation.flower import from_record, to_record
config, family, kind = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
ctx = Context(run_id=7, node_id=1, node_config=config, state=RecordDict(), run_config={"handlers": family})
if kind == "hello":
    hello = Message(RecordDict({"hello": ConfigRecord({"nonce": "00"})}), dst_node_id=1, message_type=f"query.{HELLO}")
    out = {"client": str(client_app(hello, ctx).content["hello"]["client-id"])}
else:  # a message of the family: routed from the routes kept, answered by the family imported now
    ask = Message(to_record(bytes(encode(Request(kind.split(".")[1])))), dst_node_id=1, message_type=kind)
    out = {"rows": decode(from_record(client_app(ask, ctx).content)).config["n_rows"]}
print(json.dumps({**out, "torch": "torch" in sys.modules}))
"""


def test_a_message_that_needs_only_the_routes_does_not_import_the_family(parts, tmp_path):
    """The first message of a run imports its family (fedpc: torch, scikit-learn) and keeps the
    family's routes in the node's run folder; a later message of the run that needs no handler
    (the hello, SecAgg+'s key stages) reads them there instead of importing the family again,
    and routes kept for another family are not taken."""
    import json
    import subprocess
    import sys

    part, folder = parts
    config = {"client-id": "client-0", "data": str(folder / "client-0.csv"), "schema": str(folder / "manifest.json"),
              "workdir": str(tmp_path / "node")}

    def message(family: str, kind: str = "hello") -> dict:
        done = subprocess.run([sys.executable, "-c", HELLO_PROCESS, json.dumps(config), family, kind],
                              capture_output=True, text=True, timeout=120, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])

    kept = tmp_path / "node" / "run-7" / "routes.json"
    assert message("fedpc") == {"client": "client-0", "torch": True}
    routes = json.loads(kept.read_text())
    assert routes["handlers"] == "fedpc" and routes["routes"]["fit"] == "train" and routes["routes"]["em"] == "train"
    assert message("fedpc") == {"client": "client-0", "torch": False}
    assert message("fedpc", "query.describe") == {"rows": len(part["client-0"].train), "torch": True}
    assert message("moments")["torch"] is False  # (moments needs no torch: its routes replace fedpc's)
    assert json.loads(kept.read_text())["handlers"] == "moments"
    kept.write_text('{"handlers": "moments", "routes": {"describe": "evaluate"}}')  # not a kind: not taken
    assert message("moments", "query.describe")["rows"] == len(part["client-0"].train)
    kept.write_text("{")  # unreadable: the family is imported again
    assert message("fedpc") == {"client": "client-0", "torch": True}


def test_supernodes_that_never_connect_are_named(monkeypatch):
    """A SuperNode with the wrong address, CA or key never connects: the run names it."""
    from types import SimpleNamespace

    from flwr.supercore.task_identity import TaskIdentity

    from fedpgm.federation.diagnostics import HANDLERS
    from fedpgm.federation.flower import FlowerFederation

    monkeypatch.setattr(TaskIdentity, "_run_id", 7)  # as inside a ServerApp process
    monkeypatch.setattr(TaskIdentity, "_node_id", 0)
    monkeypatch.setattr(TaskIdentity, "_task_id", 1)

    class OneNodeGrid:  # the SuperLink sees client-0's node only
        def get_node_ids(self):
            return [11]

        def send_and_receive(self, messages, timeout=None):
            return [SimpleNamespace(has_content=lambda: True, metadata=SimpleNamespace(src_node_id=11),
                                    content={"hello": {"client-id": "client-0"}}) for _ in messages]

    with pytest.raises(FedpgmError, match=r"client\(s\) \['client-1', 'client-2'\] did not connect within 1.0 s; "
                                          "check each missing SuperNode's --superlink address, TLS root"):
        FlowerFederation(OneNodeGrid(), HANDLERS, 3, wait_s=1.0, names=["client-0", "client-1", "client-2"])


def test_a_node_counts_as_a_client_only_by_its_allow_listed_key(tmp_path, monkeypatch, capsys):
    """With run config ``node-keys`` a node's claimed client id counts only if it signs the
    server's challenge with the SuperNode key allow-listed for that id: a rogue node with a
    registered key of its own that claims client-0 is refused and named; a signature made for
    another challenge (a replay) or no proof at all does not pass either."""
    from types import SimpleNamespace

    from flwr.supercore.task_identity import TaskIdentity

    from fedpgm.federation.diagnostics import HANDLERS
    from fedpgm.federation.flower import FlowerFederation, check_identity, hello_challenge, prove_identity
    from fedpgm.federation.pki import fingerprint, write_node_keys

    monkeypatch.setattr(TaskIdentity, "_run_id", 7)  # as inside a ServerApp process
    monkeypatch.setattr(TaskIdentity, "_node_id", 0)
    monkeypatch.setattr(TaskIdentity, "_task_id", 1)
    for name in ("client-0", "client-1", "rogue"):
        write_node_keys(tmp_path, name)
    key_of, claim = {11: "client-0", 12: "client-1", 13: "rogue"}, {11: "client-0", 12: "client-1", 13: "client-0"}

    def hello(node: int, nonce: str) -> dict:  # what a node's ClientApp answers (``flower.hello``)
        return {"client-id": claim[node], **prove_identity(str(tmp_path / f"{key_of[node]}.key"),
                                                           hello_challenge(0, node, nonce))}

    class Grid:  # two institutions and a rogue, all registered at the SuperLink
        def get_node_ids(self):
            return [13, 11, 12]

        def send_and_receive(self, messages, timeout=None):
            nodes = [(m.metadata.dst_node_id, m.content["hello"]["nonce"]) for m in messages]
            return [SimpleNamespace(has_content=lambda: True, metadata=SimpleNamespace(src_node_id=node),
                                    content={"hello": hello(node, nonce)}) for node, nonce in nodes]

    allowed = {fingerprint(tmp_path / f"{c}.pub"): c for c in ("client-0", "client-1")}
    fed = FlowerFederation(Grid(), HANDLERS, 2, wait_s=5.0, node_keys=allowed)
    assert fed.node_of == {"client-0": 11, "client-1": 12} and fed.refused == {13}
    rogue = fingerprint(tmp_path / "rogue.pub")
    refusal = f"refused SuperNode 13 claiming client 'client-0': its key {rogue} is not allow-listed"
    assert refusal in capsys.readouterr().out
    replayed = hello(11, "an old nonce")
    assert "does not verify" in check_identity(allowed, "client-0", replayed, hello_challenge(0, 11, "a new nonce"))
    assert "proved no key" in check_identity(allowed, "client-0", {"client-id": "client-0"}, b"x")
    assert check_identity(allowed, "client-1", replayed, hello_challenge(0, 11, "an old nonce")) \
        == f"its key {fingerprint(tmp_path / 'client-0.pub')} is not allow-listed for 'client-1'"


def test_a_run_config_names_registered_families_and_procedures_only():
    """A SuperNode imports only fedpgm's registered handlers: a run config that names an import
    path or an unknown family is refused; the library's own paths map to their names."""
    from fedpgm.federation.apps import handlers_path, name_of, procedure_path, HANDLERS, PROCEDURES

    assert handlers_path("fedpc") == "fedpgm.fedpc.client:HANDLERS"
    assert procedure_path("moments") == REF_PROC
    assert name_of(REF, HANDLERS, "handler family") == "moments"
    assert name_of("fedpgm.fedpc.procedure:server_procedure", PROCEDURES, "procedure") == "fedpc"
    with pytest.raises(FedpgmError, match="handler family 'fedpgm.fedpc.client:HANDLERS' cannot run on Flower"):
        handlers_path("fedpgm.fedpc.client:HANDLERS")  # what a server could have sent before
    with pytest.raises(FedpgmError, match="procedure 'os:system' cannot run on Flower; use one of moments"):
        procedure_path("os:system")


def test_a_simulated_node_serves_the_client_of_its_partition_id(parts, tmp_path):
    from flwr.app import Context, RecordDict

    from fedpgm.federation.flower import node_context

    part, folder = parts
    run_config = {"simulation-partition": str(folder), "simulation-workdir": str(tmp_path / "sim")}
    ctx = node_context(Context(run_id=3, node_id=9, node_config={"partition-id": 2, "num-partitions": 3},
                               state=RecordDict(), run_config=run_config))
    assert ctx.client_id == "client-2" and len(ctx.data.train) == len(part.clients[2].train)
    assert ctx.workdir == tmp_path / "sim" / "clients" / "client-2" / "run-3"
    with pytest.raises(FedpgmError, match="simulated SuperNode 5 has no client: .* holds 3; set num-supernodes to 3"):
        node_context(Context(run_id=3, node_id=9, node_config={"partition-id": 5}, state=RecordDict(),
                             run_config=run_config))
    with pytest.raises(FedpgmError, match="needs run config simulation-partition"):
        node_context(Context(run_id=3, node_id=9, node_config={"partition-id": 0}, state=RecordDict(),
                             run_config={}))
    with pytest.raises(FedpgmError, match="runs every client of the partition"):
        LoopbackDeployment(folder, clients=["client-0"], simulation=True)

