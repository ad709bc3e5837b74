"""A real multi-process Flower deployment on loopback: one SuperLink, one SuperNode per client
CSV (as written by ``fedpgm partition``), then ``flwr run``.

``LoopbackDeployment`` starts every process itself (ports chosen free on 127.0.0.1, each in its
own process group), records their PIDs, and stops all of them, children included, on
``stop()``/exit, then removes its work folder if it made it. Every group and that folder are
also registered with this process's reaper (``lifecycle.guard``), so a SIGKILL of the parent
still stops them. A run fails within seconds when ``flwr run`` or the SuperLink exits without a
result. The same commands with TLS and SuperNode authentication work across machines:
see ``docs/runtime.md``. With a ``pki``, as documented there, SuperNodes reach the SuperLink's
Fleet API only, through the gateway on ``port`` (``pki.fleet_gateway``), run only the signed app
(``--trusted-entities``) and count as clients by their keys (run config ``node-keys``).

With ``simulation=True`` the SuperLink runs Flower's Simulation Runtime (``--simulation``, Ray
inside ``flwr-simulation``) instead of separate SuperNodes: ``flwr run`` asks for one simulated
node per client of the partition (``--federation-config num-supernodes=K``), and node ``i``
serves the ``i``-th client (``fedpgm.federation.flower.simulated_node_config``). Same app, same
handlers, same numbers; it needs ``pip install 'fedpgm[simulation]'`` (Ray).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from fedpgm.data.policy import ClientPolicy
from fedpgm.federation.identity import Identity
from fedpgm.data.schema import Schema
from fedpgm.errors import FedpgmError
from fedpgm.federation.apps import HANDLERS, PROCEDURES, app_dir, name_of
from fedpgm.federation.lifecycle import guard
from fedpgm.federation.pki import Pki, sign_app
from fedpgm.federation.ports import free_port, port_open
from fedpgm.federation.reaper import alive as group_alive, descendant_groups

EXIT_GRACE_S = 5.0
STREAM_GRACE_S = 15.0  # after the result file: how long `flwr run` may take to stream the result line
ENV = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1"}


def flwr_tool(name: str) -> str:
    """The Flower executable installed beside this interpreter."""
    path = Path(sys.executable).parent / name
    return str(path) if path.exists() else name


def toml_value(v) -> str:
    return json.dumps(v) if isinstance(v, str) else repr(v).lower() if isinstance(v, bool) else repr(v)


@dataclass
class Node:
    """A SuperNode process of a loopback deployment, serving one client."""
    client_id: str
    process: subprocess.Popen
    port: int


class LoopbackDeployment:
    """SuperLink + SuperNodes for the clients in ``partition_dir`` (its ``manifest.json``)."""

    def __init__(self, partition_dir: str | Path, workdir: str | Path | None = None,
                 clients: list[str] | None = None, port: int | None = None,
                 policies: dict[str, ClientPolicy] | None = None, pki: Pki | None = None,
                 simulation: bool = False) -> None:
        self.partition_dir = Path(partition_dir).resolve()
        manifest = self.partition_dir / "manifest.json"
        if not manifest.is_file():
            raise FedpgmError(f"{self.partition_dir} has no manifest.json; write one with `fedpgm partition`")
        self.manifest = json.loads(manifest.read_text())
        entries = self.manifest["clients"]
        self.files = {e["id"]: self.partition_dir / e["train_file"] for e in entries}
        self.client_ids = clients or list(self.files)
        unknown = [c for c in self.client_ids if c not in self.files]
        if unknown:
            raise FedpgmError(f"no client(s) {unknown} in {manifest}; it has {list(self.files)}")
        if simulation:
            check_simulation(self.client_ids, list(self.files), pki, policies)
        self.own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="fedpgm-flower-")).resolve()
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.own_workdir:
            guard().add_path(self.workdir)
        bindir = str(Path(sys.executable).parent)  # Flower starts its helpers by name from PATH
        self.env = {**os.environ, **ENV, "FLWR_HOME": str(self.workdir / "flwr-home"),
                    "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}
        self.superlink: subprocess.Popen | None = None
        self.gateway: subprocess.Popen | None = None  # with a pki: the Fleet gateway on ``port``
        self.nodes: dict[str, Node] = {}
        self.ray_tmp: Path | None = None
        if simulation:  # Ray's session folders (logs, sockets) go here, removed with the deployment;
            # a short path, since Ray's socket paths must stay under the 107 characters Unix allows
            self.ray_tmp = Path(tempfile.mkdtemp(prefix="fedpgm-ray-"))
            guard().add_path(self.ray_tmp)
            self.env["RAY_TMPDIR"] = str(self.ray_tmp)
        self.runs: list[Run] = []
        self.policies = dict(policies or {})
        self.pki = pki  # TLS and SuperNode authentication (``fedpgm.federation.pki``); None: plain text
        if port is not None and port_open(port):
            raise FedpgmError(f"port {port} on 127.0.0.1 is in use; choose another or leave it unset")
        self.port = port or 0  # where SuperNodes connect: the SuperLink, or with a pki the gateway
        self.link_port = 0  # the SuperLink's own port (its Control API: what `flwr` uses)
        self.simulation = simulation

    # -- processes --------------------------------------------------------------------------
    def spawn(self, args: list[str], log: str, env: dict | None = None) -> subprocess.Popen:
        with open(self.workdir / log, "ab") as out:
            return start_guarded(args, out, env or self.env, self.workdir)

    def start(self, timeout: float = 60.0) -> "LoopbackDeployment":
        security = (["--insecure"] if self.pki is None else
                    ["--ssl-ca-certfile", str(self.pki.ca), "--ssl-certfile", str(self.pki.server_cert),
                     "--ssl-keyfile", str(self.pki.server_key), "--enable-supernode-auth"])

        def superlink(port: int) -> list[str]:
            return [flwr_tool("flower-superlink"), *security, "--host", "127.0.0.1", "--port", str(port),
                    "--disable-runtime-dependency-installation", *(["--simulation"] if self.simulation else [])]

        # (with a pki the user's port is the gateway's, and the SuperLink's own a free one)
        self.link_port = self.serve("superlink", superlink, timeout, self.port if self.pki is None else 0)
        if self.pki is None:
            self.port = self.link_port
        else:
            self.start_gateway(self.pki, timeout)
        home = Path(self.env["FLWR_HOME"])
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(
            f'[superlink]\ndefault = "loopback"\n\n[superlink.loopback]\n'
            f'address = "127.0.0.1:{self.link_port}"\n'
            + ("insecure = true\n" if self.pki is None else f'root-certificates = "{self.pki.ca}"\n'))
        if self.simulation:  # the SuperLink simulates the nodes itself
            return self
        for cid in self.client_ids:
            self.register(cid)
            self.start_node(cid, wait=False)
        for cid in self.client_ids:
            self.wait_node(cid, timeout)
        return self

    def start_gateway(self, pki: Pki, timeout: float) -> None:
        """Sign the app and start the Fleet gateway on ``port``, the one port SuperNodes need."""
        signatures, link = self.workdir / "signatures", f"127.0.0.1:{self.link_port}"
        sign_app(pki.app_key, signatures)
        self.port = self.serve("gateway", lambda port: pki.gateway_args(link, signatures, "127.0.0.1", port),
                               timeout, self.port)

    def serve(self, role: str, args: Callable[[int], list[str]], timeout: float, port: int = 0,
              attempts: int = 3) -> int:
        """Start the ``role`` process ("superlink" or "gateway", kept as that attribute, logging to
        ``role.log``) as ``args(port)`` and wait until it listens on ``port`` (0: a free one); where a
        free port was taken before the process bound it, start it again on another, up to
        ``attempts`` times in all. Its port."""
        log, attempt = f"{role}.log", 1
        while True:
            chosen = port or free_port()
            proc = self.spawn(args(chosen), log)
            setattr(self, role, proc)  # (``stop`` stops it, whatever happens next)
            try:
                self.wait_port(chosen, proc, log, timeout)
                return chosen
            except FedpgmError:  # (a process still running timed out: ``stop`` stops it)
                if port or attempt == attempts or not self.lost_its_port(proc, log):
                    raise
            attempt += 1

    def register(self, client_id: str, public_key: Path | None = None, timeout: float = 60.0) -> None:
        """With node authentication, register the SuperNode's public key at the SuperLink
        (``flwr supernode register``), as the federation's operator does once per institution."""
        if self.pki is None:
            return
        key = public_key or self.pki.node_pub(client_id)
        done = subprocess.run([flwr_tool("flwr"), "supernode", "register", str(key), "loopback"], env=self.env,
                              cwd=self.workdir, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0 or "registered successfully" not in done.stdout:
            raise FedpgmError(f"registering the key of '{client_id}' failed: "
                              f"{' '.join((done.stdout + done.stderr).split())[-300:]}")

    def supernode_args(self, client_id: str, port: int, config: str, key: Path | None = None) -> list[str]:
        """The ``flower-supernode`` command of a client: plain text, or TLS checked against the
        CA with the node's key (``key``, default the client's own), running only apps signed by the
        trusted entities; ``config``: its node config, a TOML file or inline ``key="value"`` pairs."""
        security = (["--insecure"] if self.pki is None else
                    ["--root-certificates", str(self.pki.ca),
                     "--auth-supernode-private-key", str(key or self.pki.node_key(client_id)),
                     "--trusted-entities", str(self.pki.trusted_entities)])
        return [flwr_tool("flower-supernode"), *security, "--superlink", f"127.0.0.1:{self.port}",
                "--host", "127.0.0.1", "--port", str(port), "--node-config", config]

    def identity_files(self, client_id: str) -> dict[str, str]:
        """Node config entries for the party's identity key and the parties' roster
        (``fedpgm.federation.identity``: how parties authenticate each other's PSI messages): the
        PKI's, or made once for every client of the partition. In a deployment across institutions
        each makes its own key and the roster is agreed out of band, like the CA."""
        if self.pki is not None and self.pki.roster.is_file():
            return {"identity": str(self.pki.identity(client_id)), "roster": str(self.pki.roster)}
        folder = self.workdir / "identity"
        roster = folder / "roster.json"
        if not roster.is_file():
            folder.mkdir(parents=True, exist_ok=True)
            for cid, identity in Identity.generate(sorted(self.files)).items():
                identity.save(folder / f"{cid}.key", roster)
        return {"identity": str(folder / f"{client_id}.key"), "roster": str(roster)}

    def start_node(self, client_id: str, wait: bool = True, timeout: float = 60.0) -> Node:
        """Start the SuperNode of ``client_id``; with ``wait``, return once it listens."""
        if client_id not in self.files:
            raise FedpgmError(f"no client '{client_id}' in {self.partition_dir}/manifest.json")
        port = free_port()
        work = self.workdir / "clients" / client_id
        work.mkdir(parents=True, exist_ok=True)
        values = {"client-id": client_id, "data": str(self.files[client_id]),
                  "schema": str(self.node_manifest(client_id, work)), "workdir": str(work)}
        if self.pki is not None:  # the key its ClientApp proves it holds (``fedpgm.federation.flower``)
            values["auth-key"] = str(self.pki.node_key(client_id))
        if client_id in self.policies:
            values["policy"] = json.dumps(self.policies[client_id].to_dict(), separators=(",", ":"))
        values.update(self.identity_files(client_id))
        # a node config file: Flower's inline `key=value` form cannot carry a JSON value (its quotes)
        config = work / "node.toml"
        config.write_text("".join(f"{k} = {toml_value(v)}\n" for k, v in values.items()))
        env = {**self.env, "FLWR_HOME": str(work / "flwr-home")}
        proc = self.spawn(self.supernode_args(client_id, port, str(config)), f"supernode-{client_id}.log", env)
        self.nodes[client_id] = Node(client_id, proc, port)
        if wait:
            self.wait_node(client_id, timeout)
        return self.nodes[client_id]

    def node_manifest(self, client_id: str, folder: Path) -> Path:
        """The manifest one SuperNode reads: its own entry and the schema of its own columns only
        (the partition's manifest lists every client's columns and row ids)."""
        entry = next(e for e in self.manifest["clients"] if e["id"] == client_id)
        schema = Schema.from_dict(self.manifest["schema"]).select(entry["columns"])
        path = folder / "manifest.json"
        path.write_text(json.dumps({**{k: v for k, v in self.manifest.items() if k not in ("schema", "clients")},
                                    "schema": schema.to_dict(), "clients": [entry]}))
        return path

    def wait_node(self, client_id: str, timeout: float, attempts: int = 3) -> None:
        """Wait until the SuperNode listens; one whose port was taken before it bound it is
        started again on another port (up to ``attempts`` times)."""
        for attempt in range(attempts):
            node = self.nodes[client_id]
            log = f"supernode-{client_id}.log"
            try:
                return self.wait_port(node.port, node.process, log, timeout)
            except FedpgmError:
                if attempt == attempts - 1 or not self.lost_its_port(node.process, log):
                    raise
            self.start_node(client_id, wait=False)

    def lost_its_port(self, proc: subprocess.Popen, log: str) -> bool:
        """Whether ``proc`` exited because its port was taken (``log`` says so); if so, its reaper
        entry and its log are dropped, so that it can start again on another port."""
        if proc.poll() is None or "address already in use" not in (self.workdir / log).read_text().lower():
            return False
        guard().forget_group(proc.pid)
        (self.workdir / log).unlink()
        return True

    def wait_port(self, port: int, proc: subprocess.Popen, log: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not port_open(port):
            if proc.poll() is not None:
                tail = (self.workdir / log).read_text()[-500:]
                raise FedpgmError(f"{log[:-4]} exited with code {proc.returncode}: {tail.strip()}")
            if time.monotonic() > deadline:
                raise FedpgmError(f"{log[:-4]} did not open port {port} within {timeout} s")
            time.sleep(0.2)

    @property
    def pids(self) -> list[int]:
        procs = [p for p in (self.superlink, self.gateway) if p] + [n.process for n in self.nodes.values()]
        return [p.pid for p in procs]

    def kill_node(self, client_id: str) -> None:
        """SIGKILL one SuperNode and its children (a crash, for failure drills)."""
        node = self.nodes[client_id]
        kill_group(node.process, signal.SIGKILL)

    def stop(self) -> None:
        for run in self.runs:
            run.stop()
        procs = [n.process for n in self.nodes.values()] + [p for p in (self.gateway, self.superlink) if p]
        # Flower's helpers (flower-superexec, flwr-simulation and its Ray processes) run in
        # sessions of their own: found now, stopped with the processes that started them
        helpers = descendant_groups([p.pid for p in procs]) - {p.pid for p in procs}
        groups = [p.pid for p in procs] + sorted(helpers)
        for g in groups:
            signal_group(g, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for p in procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for g in groups:
            while group_alive(g) and time.monotonic() < deadline:
                time.sleep(0.1)
            signal_group(g, signal.SIGKILL)
        for p in procs:
            guard().forget_group(p.pid)
        if self.own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            guard().forget_path(self.workdir)
        if self.ray_tmp is not None:
            shutil.rmtree(self.ray_tmp, ignore_errors=True)
            guard().forget_path(self.ray_tmp)

    def __enter__(self) -> "LoopbackDeployment":
        try:
            return self.start()
        except BaseException:  # (a failed or interrupted start: ``__exit__`` would not run)
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- runs -------------------------------------------------------------------------------
    def submit(self, procedure: str, handlers: str, args: dict | None = None,
               clients: int | None = None, timeout: float = 300.0, wait_s: float = 120.0,
               exchange_timeout: float | None = None) -> "Run":
        """Start ``flwr run`` for ``procedure`` without waiting; see ``Run.result``. ``timeout``
        bounds each exchange with the clients unless ``exchange_timeout`` is given."""
        result = self.workdir / f"result-{time.time_ns()}.json"
        cfg = self.workdir / "run-config.toml"
        names = list(self.client_ids if self.simulation else self.nodes)
        values = {"procedure": name_of(procedure, PROCEDURES, "procedure"),
                  "handlers": name_of(handlers, HANDLERS, "handler family"), "clients": clients or len(names),
                  "client-ids": ",".join(names), "args-json": json.dumps(args or {}), "result": str(result),
                  "node-keys": json.dumps(self.pki.allow_list(names)) if self.pki else "",
                  "timeout-s": float(exchange_timeout or timeout), "wait-s": float(wait_s)}
        if self.simulation:  # (the simulated parties' identities: one folder, as identity_files makes them)
            folder = Path(self.identity_files(names[0])["identity"]).parent
            values.update({"simulation-partition": str(self.partition_dir),
                           "simulation-workdir": str(self.workdir / "simulation"), "simulation-identity": str(folder)})
        cfg.write_text("".join(f"{k} = {toml_value(v)}\n" for k, v in values.items()))
        log = self.workdir / f"flwr-run-{result.stem}.log"
        cmd = [flwr_tool("flwr"), "run", str(app_dir()), "loopback", "--stream", "--run-config", str(cfg)]
        if self.simulation:  # one simulated node per client, one CPU each
            cmd += ["--federation-config", f"num-supernodes={len(names)} client-resources-num-cpus=1"]
        with open(log, "ab") as out:
            proc = start_guarded(cmd, out, self.env, self.workdir)
        self.runs.append(Run(proc, result, log, self.superlink))
        return self.runs[-1]

    def run(self, procedure: str, handlers: str, args: dict | None = None,
            clients: int | None = None, timeout: float = 300.0, wait_s: float = 120.0,
            exchange_timeout: float | None = None) -> dict:
        """``flwr run`` the procedure and return its result dict (raises on failure): the whole
        run within ``timeout``, each exchange within ``exchange_timeout`` (default the same)."""
        return self.submit(procedure, handlers, args, clients, timeout, wait_s, exchange_timeout).result(timeout)


@dataclass
class Run:
    """A submitted ``flwr run``: its process, result file, streamed log and the SuperLink."""

    process: subprocess.Popen
    result_path: Path
    log: Path
    superlink: subprocess.Popen | None = None
    ended_at: float | None = None  # when ``flwr run`` was first seen to have exited

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def tail(self) -> str:
        """The end of the streamed output on one line, without terminal colour codes."""
        return " ".join(re.sub(r"\x1b\[[0-9;]*m", "", self.output())[-600:].split())

    def broken(self) -> str | None:
        """Why no result can come any more (the SuperLink died; ``flwr run`` exited more than
        ``EXIT_GRACE_S`` ago without one), or None while it still can."""
        if self.superlink is not None and self.superlink.poll() is not None:
            return f"the SuperLink exited (code {self.superlink.returncode}) during the run"
        if self.process.poll() is not None:
            self.ended_at = self.ended_at or time.monotonic()
            if time.monotonic() - self.ended_at > EXIT_GRACE_S:  # `--stream` may exit just before
                return f"`flwr run` exited (code {self.process.returncode}) without a result"
        return None

    def wait_for(self, text: str, timeout: float = 300.0) -> None:
        """Block until the run's streamed output contains ``text`` (e.g. a procedure's log line)."""
        deadline = time.monotonic() + timeout
        while text not in self.output():
            if self.result_path.exists():
                self.raise_error()
                raise FedpgmError(f"the Flower run ended before printing '{text}': {self.tail()}")
            why = self.broken() or (time.monotonic() > deadline and f"no '{text}' within {timeout} s")
            if why:
                raise FedpgmError(f"the Flower run failed before printing '{text}': {why}: {self.tail()}")
            time.sleep(0.2)

    def raise_error(self) -> None:
        out = json.loads(self.result_path.read_text())
        if "error" in out:
            raise FedpgmError(f"the Flower run failed: {out['error']}")

    def result(self, timeout: float = 300.0) -> dict:
        deadline = time.monotonic() + timeout
        why = None
        while not self.result_path.exists():
            why = self.broken() or (time.monotonic() > deadline and f"no result within {timeout} s")
            if why:
                break
            time.sleep(0.2)
        if self.result_path.exists():  # let `flwr run` stream the rest of the log (the result line)
            until = time.monotonic() + STREAM_GRACE_S
            while self.process.poll() is None and "fedpgm-result: " not in self.output() \
                    and time.monotonic() < until:
                time.sleep(0.2)
        self.stop()
        if not self.result_path.exists():
            raise FedpgmError(f"the Flower run failed: {why}: {self.tail()}")
        self.raise_error()
        return json.loads(self.result_path.read_text())

    def stop(self) -> None:
        """Stop ``flwr run`` (and its group) if it still runs."""
        kill_group(self.process, signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            kill_group(self.process, signal.SIGKILL)
        guard().forget_group(self.process.pid)


def check_simulation(clients: list[str], partition: list[str], pki, policies) -> None:
    """The Simulation Runtime runs every client of the partition, in its order, in plain text
    with default policies (it has no per-node settings); anything else is refused up front."""
    if clients != partition:
        raise FedpgmError(f"the Simulation Runtime runs every client of the partition ({partition}); "
                          "write a partition with just the clients wanted")
    if pki is not None or policies:
        raise FedpgmError("TLS and per-client policies need real SuperNodes; drop simulation=True")
    if importlib.util.find_spec("ray") is None:
        raise FedpgmError("the Simulation Runtime needs Ray; install it with "
                          "pip install -c constraints.txt 'fedpgm[simulation]'")


def start_guarded(args: list[str], out, env: dict, cwd: Path) -> subprocess.Popen:
    """Start ``args`` in its own session, logging to ``out``, its group registered with the
    reaper (so it dies with this process, however this process ends)."""
    proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True, cwd=cwd)
    guard().add_group(proc.pid)
    return proc


def kill_group(proc: subprocess.Popen, sig: int) -> None:
    """Signal a process's whole group (it was started in its own session)."""
    signal_group(proc.pid, sig)


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
