"""Three institutions on a real loopback deployment with TLS, SuperNode authentication, the Fleet
gateway and the signed app: a vertical FedPC fit over parties whose row ids differ, aligned by
PSI, equals the in-process fit; an unregistered key, a plain-text SuperNode and one that trusts
another CA are refused. docs/runtime.md's walk-through is these commands."""

import signal
import subprocess
import time

import numpy as np
import pytest

from fedpgm.data import load_dataset, partition
from fedpgm.federation.deploy import LoopbackDeployment, flwr_tool, kill_group
from fedpgm.federation.ports import free_port
from fedpgm.federation.pki import write_node_keys, write_pki
from fedpgm.fedpc.experiment import HANDLERS, FitSettings, run_fedpc


@pytest.mark.slow
def test_fedpc_over_tls_with_node_auth_psi_and_intruders_refused(tmp_path):
    ds = load_dataset("breast_cancer", seed=0)
    settings = FitSettings(split="vertical", clients=3, seed=0, centralized=False, glue="combinatorial",
                           partition={"overlap": 0.8}, align="psi", params={"min_instances_slice": 50})
    part = partition(ds, "vertical", 3, seed=0, overlap=0.8)
    part.write(tmp_path / "parts")
    pki = write_pki(tmp_path / "pki", [c.client_id for c in part.clients])
    write_node_keys(pki.folder, "intruder")  # a key pair nobody registered
    other = write_pki(tmp_path / "other-pki", ["client-1"])  # a CA the SuperLink's certificate is not from
    np.savez(tmp_path / "test.npz", X=ds.test[ds.schema.names].to_numpy(dtype=float))
    args = {"fit": settings.fit_args(), "test": str(tmp_path / "test.npz"), "columns": ds.schema.names,
            "target": ds.schema.label, "out": None, "method": "fedpc"}
    with LoopbackDeployment(tmp_path / "parts", workdir=tmp_path / "dep", pki=pki) as dep:
        assert "--enable-supernode-auth" in dep.superlink.args and "--insecure" not in dep.superlink.args
        assert all("--trusted-entities" in n.process.args for n in dep.nodes.values())  # the signed app only
        remote = dep.run("fedpgm.fedpc.procedure:server_procedure", HANDLERS, args, timeout=600)
        config = "client-id=\"intruder\" data=\"x\" schema=\"x\" workdir=\"x\""
        intruder = start(dep.supernode_args("intruder", free_port(), config, pki.node_key("intruder")),
                         tmp_path / "intruder.log", dep.env)
        plain = dep.supernode_args("client-0", free_port(), config.replace("intruder", "plain"))
        plain = [a for a in plain if a not in ("--root-certificates", str(pki.ca), "--auth-supernode-private-key",
                                               str(pki.node_key("client-0")))]
        plain.insert(1, "--insecure")
        plaintext = start(plain, tmp_path / "plain.log", dep.env)
        wrong_ca = dep.supernode_args("client-1", free_port(), config.replace("intruder", "wrong-ca"))
        wrong_ca[wrong_ca.index("--root-certificates") + 1] = str(other.ca)
        mismatched = start(wrong_ca, tmp_path / "wrong-ca.log", dep.env)
        try:
            assert intruder.wait(timeout=120) != 0
            assert "Failed to activate SuperNode" in (tmp_path / "intruder.log").read_text(errors="replace")
            time.sleep(10)
            assert plaintext.poll() is None  # it keeps knocking, and never gets in
            assert "Connection attempt failed" in (tmp_path / "plain.log").read_text(errors="replace")
            assert mismatched.wait(timeout=60) != 0  # the registered key, but not the federation's CA
            assert "CERTIFICATE_VERIFY_FAILED" in (tmp_path / "wrong-ca.log").read_text(errors="replace")
            listed = subprocess.run([flwr_tool("flwr"), "supernode", "list", "loopback", "--format", "json"],
                                    env=dep.env, cwd=dep.workdir, capture_output=True, text=True, timeout=60).stdout
            assert listed.count('"online"') == 3, listed  # the three registered clients only
        finally:
            for p in (intruder, plaintext, mismatched):
                kill_group(p, signal.SIGKILL)
                p.wait(10)
    _, local = run_fedpc(ds, settings)
    assert remote["info"]["alignment"]["intersection"] == local["alignment"]["intersection"] == 364
    assert np.mean(remote["test_ll"]) == pytest.approx(local["test_loglik"], rel=1e-10)


def start(args: list[str], log, env: dict) -> subprocess.Popen:
    """A process in its own group (its helpers are stopped with it), logging to ``log``."""
    with open(log, "wb") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
