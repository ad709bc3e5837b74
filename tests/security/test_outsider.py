"""The documented deployment across machines, on loopback, attacked (red team, item 1): an outsider
holding only ``ca.pem`` finds no Control API on the port SuperNodes use; given one anyway (the old
deployment exposed it), the app it registers and submits, unsigned or signed by its own key, never
runs on an institution's SuperNode; and a rogue SuperNode with a registered key of its own that
claims an institution's client id is refused by the server, while the honest run still works."""

import json
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from flwr.common.constant import ErrorCode

from fedpgm.data import load_dataset, partition
from fedpgm.errors import FedpgmError
from fedpgm.federation import InProcessFederation
from fedpgm.federation.deploy import LoopbackDeployment, Run, flwr_tool, kill_group, start_guarded
from fedpgm.federation.ports import free_port
from fedpgm.federation.lifecycle import guard
from fedpgm.federation.pki import fingerprint, sign_app, write_node_keys, write_pki, write_signing_key
from fedpgm.federation.reference import federated_moments

OUTSIDER_APP = '''
import json, pathlib
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import ServerApp

server = ServerApp()
client = ClientApp()


@client.query()
def loot(msg, context):  # what the red team's app did: send back the node config and raw CSV rows
    config = {k: str(v) for k, v in context.node_config.items()}
    rows = pathlib.Path(config.get("data", "/nonexistent")).read_text()[:2000] if "data" in config else ""
    return Message(RecordDict({"loot": ConfigRecord({"config": json.dumps(config), "rows": rows})}), reply_to=msg)


@server.main()
def main(grid, context):
    asks = [Message(RecordDict(), dst_node_id=n, message_type="query") for n in grid.get_node_ids()]
    got = []
    for reply in grid.send_and_receive(asks, timeout=60):
        if reply.has_error():
            got.append({"node": reply.metadata.src_node_id, "error": reply.error.code, "reason": reply.error.reason})
        else:
            got.append({"node": reply.metadata.src_node_id, "loot": dict(reply.content["loot"])})
    print("outsider-got: " + json.dumps(got), flush=True)
'''
OUTSIDER_PYPROJECT = '''
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "loot"
version = "1.0.0"
dependencies = ["flwr"]

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "outsider"

[tool.flwr.app.components]
serverapp = "loot:server"
clientapp = "loot:client"

[tool.flwr.app.config]
rounds = 1
'''


def flwr(*commands: list[str], env: dict, cwd: Path, timeout: float = 90.0) -> list[tuple[int, str]]:
    """Each ``flwr COMMAND``, all at once, each in its own process group (it dies with this
    process): their exit codes and outputs, within ``timeout``."""
    started = []
    for args in commands:
        log = cwd / f"flwr-{time.time_ns()}.log"
        with open(log, "wb") as out:
            started.append((start_guarded([flwr_tool("flwr"), *args], out, env, cwd), log))
    deadline = time.monotonic() + timeout
    done = []
    try:
        for proc, log in started:
            code = proc.wait(max(0.1, deadline - time.monotonic()))
            done.append((code, " ".join(log.read_text(errors="replace").split())))
    finally:
        for proc, _ in started:
            if proc.poll() is None:
                kill_group(proc, signal.SIGKILL)
                proc.wait(10)
            guard().forget_group(proc.pid)
    return done


def submit(app: Path, connection: str, env: dict, cwd: Path, superlink) -> Run:
    """``flwr run --stream`` of the outsider's app, its output followed like a fedpgm run's."""
    log = cwd / f"outsider-run-{time.time_ns()}.log"
    with open(log, "wb") as out:
        proc = start_guarded([flwr_tool("flwr"), "run", str(app), connection, "--stream"], out, env, cwd)
    return Run(proc, cwd / "no-result.json", log, superlink)


def what_came_back(run: Run, timeout: float = 120.0) -> list[dict]:
    try:
        run.wait_for("outsider-got: ", timeout)
        line = next(x for x in run.output().splitlines() if "outsider-got: " in x)
        return json.loads(line.split("outsider-got: ", 1)[1])
    finally:
        run.stop()


def wait_for_text(path: Path, text: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        content = path.read_text(errors="replace") if path.exists() else ""
        if text in content:
            return content
        time.sleep(0.2)
    raise FedpgmError(f"no '{text}' in {path} within {timeout} s")


@pytest.mark.slow
def test_an_outsider_runs_nothing_and_a_rogue_node_cannot_claim_an_institution(tmp_path):
    ds = load_dataset("breast_cancer", seed=0)
    part = partition(ds, "horizontal", 2, seed=0)
    part.write(tmp_path / "parts")
    pki = write_pki(tmp_path / "pki", [c.client_id for c in part.clients])
    outsider = tmp_path / "outsider"  # what the outsider holds: ca.pem, its own keys and app
    outsider.mkdir()
    shutil.copy(pki.ca, outsider / "ca.pem")
    write_node_keys(outsider, "outsider")
    write_signing_key(outsider, "outsider-signing", "fpk_outsider")
    for app, version in (("unsigned", "1.0.0"), ("self-signed", "1.0.1")):  # two apps, two FABs
        (outsider / app).mkdir()
        (outsider / app / "loot.py").write_text(OUTSIDER_APP)
        (outsider / app / "pyproject.toml").write_text(OUTSIDER_PYPROJECT.replace("1.0.0", version))
    with LoopbackDeployment(tmp_path / "parts", workdir=tmp_path / "dep", pki=pki) as dep:
        home = outsider / "flwr-home"
        home.mkdir()
        (home / "config.toml").write_text(  # "public": the one port SuperNodes use; "exposed": the
            f'[superlink]\ndefault = "public"\n\n'  # SuperLink's own (the old deployment's --host 0.0.0.0)
            f'[superlink.public]\naddress = "127.0.0.1:{dep.port}"\nroot-certificates = "{outsider}/ca.pem"\n\n'
            f'[superlink.exposed]\naddress = "127.0.0.1:{dep.link_port}"\nroot-certificates = "{outsider}/ca.pem"\n')
        env = {**dep.env, "FLWR_HOME": str(home)}

        # 1. on the port other machines reach, there is no Control API: nothing to list, register or run
        listed, registered, started = flwr(["supernode", "list", "public"],
                                           ["supernode", "register", str(outsider / "outsider.pub"), "public"],
                                           ["run", str(outsider / "unsigned"), "public"], env=env, cwd=outsider)
        assert all(code != 0 for code, _ in (listed, registered, started)), (listed, registered, started)
        assert "registered successfully" not in registered[1] and "Successfully started run" not in started[1]
        gateway = (dep.workdir / "gateway.log").read_text()
        assert '"POST /v1/control/list-nodes HTTP/1.1" 404' in gateway
        assert '"POST /v1/control/start-run HTTP/1.1" 404' in gateway

        # 2. with the Control API (as the old deployment exposed it): the outsider registers its key ...
        [(code, out)] = flwr(["supernode", "register", str(outsider / "outsider.pub"), "exposed"],
                             env=env, cwd=outsider)
        assert code == 0 and "registered successfully" in out, out
        # ... and its apps, one unsigned, one signed by its own key (its signature reaching the nodes
        # as if the link attached it), get errors only: neither runs on a node
        sign_app(outsider / "outsider-signing.key", dep.workdir / "signatures", outsider / "self-signed",
                 "fpk_outsider")
        runs = [submit(outsider / app, "exposed", env, outsider, dep.superlink) for app in ("unsigned", "self-signed")]
        for got in [what_came_back(run) for run in runs]:
            assert len(got) == 2 and all(r.get("error") == ErrorCode.INVALID_FAB and "loot" not in r for r in got), got
        logs = {c: (dep.workdir / f"supernode-{c}.log").read_text(errors="replace") for c in dep.nodes}
        for log in logs.values():
            assert "App verification is not supported by the connected SuperLink" in log  # unsigned
            assert "the provided trusted entities could not verify the FAB" in log  # signed, but not trusted
            assert "loot" not in log and "Start `flwr-clientapp`" not in log  # no ClientApp ever started

        # 3. a rogue SuperNode with that registered key claims client-0 (and proves its own key)
        config = outsider / "node.toml"
        config.write_text(f'client-id = "client-0"\ndata = "{dep.files["client-0"]}"\n'
                          f'schema = "{tmp_path}/parts/manifest.json"\nworkdir = "{outsider}/work"\n'
                          f'auth-key = "{outsider}/outsider.key"\n')
        rogue_log = outsider / "rogue.log"
        with open(rogue_log, "wb") as out_file:
            rogue = start_guarded(dep.supernode_args("client-0", free_port(), str(config), outsider / "outsider.key"),
                                  out_file, {**env, "FLWR_HOME": str(outsider / "node-home")}, outsider)
        try:
            rogue_id = wait_for_text(rogue_log, "SuperNode ID: ").split("SuperNode ID: ")[1].split()[0]
            remote = dep.run("moments", "moments", timeout=180)  # the honest run, as documented
            streamed = dep.runs[-1].output()
        finally:
            kill_group(rogue, signal.SIGKILL)
            rogue.wait(10)
            guard().forget_group(rogue.pid)
    key = fingerprint(outsider / "outsider.pub")
    assert f"refused SuperNode {rogue_id} claiming client 'client-0': its key {key} is not allow-listed" in streamed
    rogue_saw = rogue_log.read_text(errors="replace")
    assert "query.fedpgm_hello" in rogue_saw and "query.describe" not in rogue_saw  # the hello, nothing after
    assert not list((outsider / "work").rglob("state.*"))  # no state: its ClientApp never served a request
    with InProcessFederation(part, "fedpgm.federation.reference:HANDLERS", mode="sequential") as fed:
        local = federated_moments(fed)
    assert remote["clients"] == local["clients"] == ["client-0", "client-1"]
    np.testing.assert_allclose(remote["mean"], local["mean"], rtol=1e-12)
