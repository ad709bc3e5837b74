"""The Flower backend (``flwr==1.41.0``): the same server procedures and client handlers,
run by a Flower ServerApp and ClientApp across processes or machines.

- ``server_app`` (``@server_app.main()`` on a ``Grid``) reads its run config: ``procedure``
  (a name in ``fedpgm.federation.apps.PROCEDURES``, called as ``procedure(federation, **args)``),
  ``handlers`` (a family in ``apps.HANDLERS``: a run config never names an import path, so a
  SuperNode imports only fedpgm's own handlers), ``clients`` (how many SuperNodes to wait for), ``args-json``,
  optionally ``result`` (path of a JSON result file on the ServerApp's host), ``timeout-s``
  (the deadline of each exchange) and ``wait-s`` (how long to wait for SuperNodes to connect).
  The result also ends the run's log as one ``fedpgm-result: {...}`` line, so an analyst who
  started the run from elsewhere gets it from ``flwr run --stream`` or ``flwr log RUN_ID``
  (``result_from_log``).
- ``client_app`` (Flower's own ``ClientApp``) routes ``query.<name>``/``train.<name>`` to the
  handler of that name in the family its run config names, learned in its lifespan hook before
  each message is dispatched: Flower starts a process per message, so a node imports its run's
  family only (the module itself loads no torch, scikit-learn, pgmpy or opacus; 1.0 s to import
  against 3.6 s with every family). Each SuperNode loads only its own data, from its node config:
  ``client-id``, ``data`` (its CSV, as written by ``fedpgm partition``), ``schema``
  (``manifest.json`` or a schema JSON) and ``workdir`` (its state is kept between messages in
  ``workdir/run-<run id>``, one folder per run, since Flower starts a new process per message) and
  optionally ``policy``, the node's own privacy policy as a JSON object (``fedpgm.data.policy``;
  defaults apply without it).
- Under the Simulation Runtime (``flower-superlink --simulation``) a node has only Flower's
  ``partition-id``; the run config's ``simulation-partition`` (a folder written by ``fedpgm
  partition``) and ``simulation-workdir`` then give node ``i`` the ``i``-th client of that
  folder's manifest (``simulated_node_config``), each node still loading only its own CSV.
- Payloads travel as native records: the message's arrays in an ``ArrayRecord`` (one ``Array``
  each, so Flower's mods see them), its name and JSON config in a ``ConfigRecord``. The codec
  stays the one description of a message: each side turns the records back into codec bytes,
  so dtypes, shapes, validation and byte counts are identical to the in-process backend.

The node-to-client map is made at start-up by a ``query.fedpgm_hello`` round that asks each
node for its ``client-id``; that handshake is runtime overhead and not in the ledger. A node's
word is taken only without an allow-list: with run config ``node-keys`` (a JSON object, the
``SHA256:...`` fingerprint of each registered SuperNode key -> the client id it may serve), each
node must sign the server's challenge (run id, node id, a fresh nonce) with its SuperNode key
(node config ``auth-key``, the file ``--auth-supernode-private-key`` reads), and its claim counts
only if that key is allow-listed for the id it claims and the signature verifies; any other node
is refused and named in the log. Flower 1.41's ``Grid`` gives a ServerApp node ids only
(``NodeInfo`` without the public key), hence the proof.
"""

from __future__ import annotations

import importlib
import json
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, RecordDict  # noqa: E402
from flwr.app import Message as FlowerMessage  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402

from fedpgm.data.partition import ClientData, load_client_csv  # noqa: E402
from fedpgm.data.policy import ClientPolicy  # noqa: E402
from fedpgm.data.schema import Schema  # noqa: E402
from fedpgm.errors import FedpgmError  # noqa: E402
from fedpgm.files import write_text_atomic  # noqa: E402
from fedpgm.threads import one_thread  # noqa: E402
from fedpgm.federation.apps import handlers_path, procedure_path  # noqa: E402
from fedpgm.federation.base import (DEFAULT_TIMEOUT_S, ClientFailure, Federation, Outcome,  # noqa: E402
                                    Payload)
from fedpgm.federation.codec import CodecError, Message, decode, encode  # noqa: E402
from fedpgm.federation import spending  # noqa: E402
from fedpgm.federation.handlers import DP_HISTORY, KINDS, ClientContext, HandlerSet, load_state, save_state  # noqa: E402
from fedpgm.federation.runtime import load_handlers  # noqa: E402
from fedpgm.federation.identity import Identity  # noqa: E402
from fedpgm.federation.inprocess import OK, serve_one  # noqa: E402
from fedpgm.federation.pki import fingerprint  # noqa: E402
from fedpgm.federation.secagg_guard import guarded_secaggplus  # noqa: E402

HELLO = "fedpgm_hello"
NODE_UNAVAILABLE = 5  # flwr.common.constant.ErrorCode.NODE_UNAVAILABLE
POLL_S = 0.05
RETURN_WAIT_S = 35.0  # how long a retry waits for an unavailable node to be back (one heartbeat + 5 s)


ARRAYS, CONFIG = "fedpgm.arrays", "fedpgm.config"  # the record names of a fedpgm message


def to_record(payload: Payload) -> RecordDict:
    """A codec message as native Flower records: each array an ``Array`` in one ``ArrayRecord``
    (so Flower's mods see them), the name and the JSON config in a ``ConfigRecord``."""
    msg = decode(payload)
    arrays = ArrayRecord({k: Array(np.require(v, requirements="C")) for k, v in msg.arrays.items()})
    return RecordDict({ARRAYS: arrays, CONFIG: ConfigRecord({"name": msg.name, "config": json.dumps(msg.config)})})


def from_record(content: RecordDict) -> bytes:
    """Native records back to the codec's bytes: what the ledger counts, identical to the
    in-process backend's, and checked like any bytes from a peer (``CodecError``)."""
    try:
        arrays = {k: a.numpy() for k, a in content.array_records[ARRAYS].items()}
        meta = content.config_records[CONFIG]
        msg = Message(str(meta["name"]), arrays, json.loads(str(meta["config"])))
    except (KeyError, ValueError, TypeError, RecursionError) as e:
        raise CodecError(f"a Flower message without readable fedpgm records ({type(e).__name__}: {e})") from None
    return bytes(encode(msg))


class FlowerFederation(Federation):
    """A federation over a Flower ``Grid`` (inside a ServerApp)."""

    def __init__(self, grid: Grid, handlers: HandlerSet, expected: int, wait_s: float = 120.0,
                 audit=None, timeout: float | None = DEFAULT_TIMEOUT_S, context: Context | None = None,
                 names: list[str] | None = None, node_keys: dict[str, str] | None = None) -> None:
        self.grid, self.handlers, self.wait_s, self.context = grid, handlers, wait_s, context
        self.names = list(names or [])  # the clients expected, if the run config names them
        self.node_keys = dict(node_keys or {})  # key fingerprint -> the client id it may serve
        self.run_id = context.run_id if context is not None else 0
        self.node_of: dict[str, int] = {}
        self.refused: set[int] = set()  # nodes whose claim failed: not asked again
        self.greet(expected, wait_s)
        super().__init__(sorted(self.node_of), audit, timeout)
        self.log(f"clients: {self.node_of}")

    def greet(self, expected: int, wait_s: float) -> None:
        """Wait until ``expected`` SuperNodes are known, asking each new one its client id."""
        deadline = time.monotonic() + wait_s
        while len(self.node_of) < expected:
            new = sorted(set(self.grid.get_node_ids()) - set(self.node_of.values()) - self.refused)
            nonces = {n: secrets.token_hex(16) for n in new}
            asks = [FlowerMessage(RecordDict({"hello": ConfigRecord({"nonce": nonces[n]})}), dst_node_id=n,
                                  message_type=f"query.{HELLO}") for n in new]
            for reply in self.grid.send_and_receive(asks, timeout=wait_s) if asks else []:
                if reply.has_content():
                    self.welcome(reply, nonces)
            if len(self.node_of) >= expected:
                break
            if time.monotonic() > deadline:
                missing = [c for c in self.names if c not in self.node_of]
                who = f"client(s) {missing} did not connect" if missing else (
                    f"only {len(self.node_of)} of {expected} SuperNodes connected")
                refused = f" ({len(self.refused)} SuperNode(s) refused: see the log)" if self.refused else ""
                raise FedpgmError(f"{who} within {wait_s} s{refused}; check each missing SuperNode's --superlink "
                                  "address, TLS root certificate, registered key and auth-key, or lower 'clients'")
            time.sleep(0.5)

    def welcome(self, reply: FlowerMessage, nonces: dict[int, str]) -> None:
        """Map the replying node to the client id it claims; with an allow-list, only once its
        key proof holds (``check_identity``), else it is refused and named in the log."""
        node = reply.metadata.src_node_id
        hello = reply.content["hello"]
        cid = str(hello["client-id"])
        if self.node_keys:
            why = check_identity(self.node_keys, cid, hello, hello_challenge(self.run_id, node, nonces[node]))
            if why:
                self.refused.add(node)
                self.log(f"refused SuperNode {node} claiming client '{cid}': {why}")
                return
        if cid in self.node_of:
            raise FedpgmError(f"two SuperNodes claim client id '{cid}'; give each its own")
        self.node_of[cid] = node

    def admit(self, clients: list[str], wait_s: float | None = None) -> None:
        """Clients that connect late: wait (``wait_s``, default the federation's) for their
        SuperNodes, then address them like the others."""
        missing = [c for c in clients if c not in self.node_of]
        if missing:
            self.log(f"waiting for clients {missing}")
            self.greet(len(self.node_of) + len(missing), self.wait_s if wait_s is None else wait_s)
            strangers = [c for c in missing if c not in self.node_of]
            if strangers:
                raise FedpgmError(f"SuperNodes connected, but not client(s) {strangers}; check their client-id")
            self.log(f"clients joined: {missing}")
        self._clients += [c for c in clients if c not in self._clients]

    def await_return(self, clients: list[str], deadline: float | None) -> None:
        """Wait until the SuperLink lists the clients' nodes as online again (a paused or
        disconnected SuperNode that resumes keeps its node id and is online at its next
        heartbeat, every 30 s), at most ``RETURN_WAIT_S`` and never past ``deadline``."""
        until = time.monotonic() + RETURN_WAIT_S
        until = until if deadline is None else min(until, deadline)
        nodes = {self.node_of[c] for c in clients}
        while time.monotonic() < until and not nodes <= set(self.grid.get_node_ids()):
            time.sleep(1.0)

    def secure_sum(self, name, order, requests):
        """By SecAgg+ (``fedpgm.federation.secagg``): the server sees masked vectors only."""
        from fedpgm.federation.secagg import secure_sum

        if self.context is None:
            raise FedpgmError("a secure sum needs the ServerApp's context; create the federation with it")
        return secure_sum(self, self.context, name, order, requests, self.timeout)

    def log(self, text: str) -> None:
        print(f"fedpgm: {text}", flush=True)  # the ServerApp's output is what `flwr run` streams

    def _exchange(self, requests, names, timeout) -> dict[str, Outcome]:
        clients = list(requests)
        msgs = [FlowerMessage(to_record(requests[c]), dst_node_id=self.node_of[c],
                              message_type=f"{self.handlers.kind(names[c])}.{names[c]}",
                              group_id=f"round-{self.ledger.rounds}") for c in clients]
        ids = list(self.grid.push_messages(msgs))
        client_of = dict(zip(ids, clients))
        pending = set(ids)
        results: dict[str, Payload | ClientFailure] = {}
        deadline = None if timeout is None else time.monotonic() + timeout
        while pending and (deadline is None or time.monotonic() < deadline):
            for reply in self.grid.pull_messages(list(pending)):
                mid = reply.metadata.reply_to_message_id
                if mid not in pending:
                    continue
                pending.discard(mid)
                c = client_of[mid]
                if reply.has_error():
                    kind = "unavailable" if reply.error.code == NODE_UNAVAILABLE else "error"
                    results[c] = ClientFailure(c, names[c], kind, str(reply.error.reason))
                else:
                    try:
                        results[c] = from_record(reply.content)
                    except CodecError as e:  # a node that sent something else than fedpgm's records
                        results[c] = ClientFailure(c, names[c], "decode", str(e))
            if pending:
                time.sleep(POLL_S)
        for mid in pending:
            c = client_of[mid]
            results[c] = ClientFailure(c, names[c], "timeout", f"no reply within {timeout} s")
        return results


def hello_challenge(run_id: int, node_id: int, nonce: str) -> bytes:
    """What a node signs to prove it holds its SuperNode key: this run, this node, a fresh nonce."""
    return f"fedpgm-hello:{run_id}:{node_id}:{nonce}".encode()


def prove_identity(key_path: str, challenge: bytes) -> dict[str, str]:
    """The node's public key (OpenSSH) and its ECDSA-SHA256 signature of ``challenge`` (hex),
    made with its SuperNode key (OpenSSH EC private key, ``--auth-supernode-private-key``)."""
    key = serialization.load_ssh_private_key(Path(key_path).read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise FedpgmError(f"node config auth-key {key_path} is not an EC key (a SuperNode key)")
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return {"public-key": public.decode(), "signature": key.sign(challenge, ec.ECDSA(hashes.SHA256())).hex()}


def check_identity(node_keys: dict[str, str], client_id: str, hello, challenge: bytes) -> str | None:
    """Why a node's claim to ``client_id`` is refused, or None: the key it shows must be the one
    allow-listed for that id (``node_keys``: fingerprint -> client id) and its signature of
    ``challenge`` must verify under that key."""
    public = str(hello.get("public-key", ""))
    if not public:
        return "it proved no key (its node config has no auth-key)"
    try:
        key_id = fingerprint(public)
        key = serialization.load_ssh_public_key(public.encode())
    except (ValueError, IndexError, UnsupportedAlgorithm) as e:
        return f"its public key is unreadable ({e})"
    if node_keys.get(key_id) != client_id:
        return f"its key {key_id} is not allow-listed for '{client_id}'"
    try:
        if not isinstance(key, ec.EllipticCurvePublicKey):
            return f"its key {key_id} is not an EC key"
        key.verify(bytes.fromhex(str(hello.get("signature", ""))), challenge, ec.ECDSA(hashes.SHA256()))
    except (InvalidSignature, ValueError):
        return f"its signature of this run's challenge does not verify under {key_id}"
    return None


def import_object(path: str):
    module, _, attr = path.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise FedpgmError(f"cannot import '{path}' ({e}); use 'package.module:NAME'") from None


def run_procedure(federation: Federation, procedure: str, args: dict) -> dict:
    """Call ``procedure(federation, **args)`` and add the ledger's totals."""
    result = import_object(procedure)(federation, **args)
    result.setdefault("communication", federation.ledger.totals())
    return result


def write_json_atomic(path: Path, payload: dict) -> None:
    write_text_atomic(path, json.dumps(payload, indent=1, default=str))


server_app = ServerApp()
RESULT_LINE = "fedpgm-result: "  # the log line that carries the result to whoever started the run
MAX_RESULT_LINE = 4_000_000  # bytes; a larger result stays in the ``result`` file only


def result_from_log(text: str) -> dict:
    """The result a run's log carries (``flwr run --stream`` or ``flwr log RUN_ID`` output)."""
    for line in reversed(text.splitlines()):
        at = line.find(RESULT_LINE)
        if at >= 0:
            return json.loads(line[at + len(RESULT_LINE):])
    raise FedpgmError("the run's log carries no result line; the run failed or is still running")


@server_app.main()
def server_main(grid: Grid, context: Context) -> None:
    """Run the procedure; its result goes to the ``result`` file (if the run config names one) and,
    as one JSON line, to the run's log, which reaches whoever started the run."""
    cfg = context.run_config
    result_path = Path(str(cfg["result"])) if str(cfg.get("result", "")) else None
    try:
        handlers = load_handlers(handlers_path(str(cfg["handlers"])))
        fed = FlowerFederation(grid, handlers, int(cfg["clients"]), float(cfg.get("wait-s", 120.0)),
                               timeout=float(cfg.get("timeout-s", DEFAULT_TIMEOUT_S)), context=context,
                               names=[c for c in str(cfg.get("client-ids", "")).split(",") if c],
                               node_keys=json.loads(str(cfg.get("node-keys", "")) or "{}"))
        result = run_procedure(fed, procedure_path(str(cfg["procedure"])), json.loads(str(cfg.get("args-json", "{}"))))
        result["backend"] = "simulation" if str(cfg.get("simulation-partition", "")) else "flower"
    except Exception as e:  # the caller reads the error from the result file and the log
        if result_path is not None:
            write_json_atomic(result_path, {"error": f"{type(e).__name__}: {e}"})
        raise
    line = json.dumps(result, default=str, separators=(",", ":"))
    if len(line) <= MAX_RESULT_LINE:  # the log first: a caller may stop reading once the file is there
        print(RESULT_LINE + line, flush=True)
    else:
        print(f"fedpgm: the result ({len(line)} bytes) is too large for the log; it is in {result_path} "
              "on the ServerApp's host", flush=True)
    if result_path is not None:
        write_json_atomic(result_path, result)


def simulated_node_config(partition_id: int, run_config) -> dict:
    """A simulated SuperNode's node config: the ``partition_id``-th client of the run config's
    ``simulation-partition`` folder, its state under ``simulation-workdir``, its identity key and
    the roster from ``simulation-identity`` where given (one host simulates every party)."""
    if not str(run_config.get("simulation-partition", "")):
        raise FedpgmError("a Simulation Runtime run needs run config simulation-partition (a folder "
                          "written by `fedpgm partition`) and simulation-workdir; see docs/runtime.md")
    folder = Path(str(run_config["simulation-partition"]))
    entries = json.loads((folder / "manifest.json").read_text())["clients"]
    if not 0 <= partition_id < len(entries):
        raise FedpgmError(f"simulated SuperNode {partition_id} has no client: {folder} holds "
                          f"{len(entries)}; set num-supernodes to {len(entries)}")
    cid = entries[partition_id]["id"]
    out = {"client-id": cid, "data": str(folder / entries[partition_id]["train_file"]),
           "schema": str(folder / "manifest.json"),
           "workdir": str(Path(str(run_config["simulation-workdir"])) / "clients" / cid)}
    keys = Path(str(run_config.get("simulation-identity", "")))
    if str(run_config.get("simulation-identity", "")) and (keys / "roster.json").is_file():
        out.update({"identity": str(keys / f"{cid}.key"), "roster": str(keys / "roster.json")})
    return out


def node_config(context: Context) -> dict:
    """The node's fedpgm settings: its node config, or under the Simulation Runtime (a
    ``partition-id`` and no ``client-id``) the simulated one."""
    nc = dict(context.node_config)
    if "client-id" not in nc and "partition-id" in nc:
        return simulated_node_config(int(nc["partition-id"]), context.run_config)
    return nc


def node_party(context: Context) -> tuple[str, ClientPolicy, Identity | None]:
    """This node's client id, its policy and its party identity (None without a roster)."""
    nc = node_config(context)
    cid = str(nc.get("client-id", ""))
    identity = Identity.load(cid, str(nc["identity"]), str(nc["roster"])) if "identity" in nc else None
    return cid, ClientPolicy.from_node_config(nc), identity


def node_context(context: Context) -> ClientContext:
    """This SuperNode's client id, its data (its own CSV only) and its state from disk."""
    nc = node_config(context)
    missing = [k for k in ("client-id", "data", "schema", "workdir") if k not in nc]
    if missing:
        raise FedpgmError(f"SuperNode node-config lacks {missing}; see docs/runtime.md")
    schema_path = Path(str(nc["schema"]))
    doc = json.loads(schema_path.read_text())
    schema = Schema.from_dict(doc["schema"] if "clients" in doc else doc)
    cid, policy, identity = node_party(context)
    train = load_client_csv(str(nc["data"]), cid, schema)
    test_path = Path(str(nc["data"])).with_suffix(".test.csv")
    test = load_client_csv(test_path, cid, schema) if test_path.is_file() else None
    workdir = Path(str(nc["workdir"])) / f"run-{context.run_id}"  # state is per run
    entry: dict = next((e for e in doc.get("clients", []) if e.get("id") == cid), {})
    data = ClientData(cid, schema.select(train.columns), train, test, entry.get("meta", {}), policy)
    return ClientContext(cid, data, workdir, load_state(workdir), identity=identity,
                         earlier_dp=spending.earlier(workdir.parent, workdir.name),
                         deployed="client-id" in context.node_config)  # (a simulated node has a partition-id)


def keep(ctx: ClientContext) -> None:
    """Save a node's run state after a message, and what its DP training spent in this run beside
    the runs' folders (``fedpgm.federation.spending``), so that no new run starts its budget afresh."""
    save_state(ctx.state, ctx.workdir)
    if DP_HISTORY in ctx.state:
        spending.record(ctx.workdir.parent, ctx.workdir.name, list(ctx.state[DP_HISTORY]))


ROUTES_FILE = "routes.json"  # in the node's run folder: the routes of the run's family


def family_routes(context: Context, family: str) -> dict[str, str]:
    """Name -> kind of every handler of ``family``. Flower starts a process per message and a
    family's import costs seconds (torch, scikit-learn), while many messages need its routes
    only (the hello, SecAgg+'s key-sharing and unmasking stages): the first message of a run
    imports the family and keeps its routes in the node's run folder, where later messages of
    the run read them."""
    nc = node_config(context)
    path = Path(str(nc["workdir"])) / f"run-{context.run_id}" / ROUTES_FILE if "workdir" in nc else None
    if path is not None and path.is_file():
        try:
            kept = json.loads(path.read_text())
            routes = {str(name): str(kind) for name, kind in kept["routes"].items()}
            if kept["handlers"] == family and set(routes.values()) <= set(KINDS):
                return routes
        except (ValueError, KeyError, TypeError, AttributeError):  # (unreadable: import the family again)
            pass
    routes = load_handlers(handlers_path(family)).routes()
    if path is not None:
        write_json_atomic(path, {"handlers": family, "routes": routes})
    return routes


def family_client_app() -> ClientApp:
    """Flower's ``ClientApp`` whose lifespan hook, before a message is dispatched, routes each
    message of the family the run names (run config ``handlers``) under the kind its handler
    declares (``family_routes``). Flower starts a process per message, so a node imports only
    that family, and only for a message its handlers serve (the others' torch, scikit-learn and
    opacus imports cost seconds a message). The hook registers on its own app (a closure): the
    Simulation Runtime calls a copy of the app in each actor."""
    app = ClientApp()
    routed: set[tuple[str, str]] = set()  # (kind, name) of the messages routed so far

    @app.lifespan()
    def learn_routes(context: Context) -> Iterator[None]:
        family = context.run_config.get("handlers")
        if family is not None:
            for name, kind in family_routes(context, str(family)).items():
                if (kind, name) not in routed:
                    routed.add((kind, name))
                    getattr(app, kind)(name)(route)
        yield

    return app


client_app = family_client_app()


@client_app.query(HELLO)
def hello(msg: FlowerMessage, context: Context) -> FlowerMessage:
    """This node's client id and, given node config ``auth-key``, its proof of holding that key."""
    nc = node_config(context)
    values: dict = {"client-id": str(nc.get("client-id", ""))}
    nonce = str(msg.content["hello"]["nonce"]) if "hello" in msg.content else ""
    if str(nc.get("auth-key", "")) and nonce:
        values.update(prove_identity(str(nc["auth-key"]), hello_challenge(context.run_id, context.node_id, nonce)))
    return FlowerMessage(RecordDict({"hello": ConfigRecord(values)}), reply_to=msg)


def route(msg: FlowerMessage, context: Context) -> FlowerMessage:
    handlers = load_handlers(handlers_path(str(context.run_config["handlers"])))
    ctx = node_context(context)
    with one_thread():  # as in-process clients run: SuperNodes sharing cores otherwise spin in each
        status, payload = serve_one(handlers, ctx, from_record(msg.content))  # other's thread pools
    if status != OK:
        raise RuntimeError(bytes(payload).decode())
    keep(ctx)
    return FlowerMessage(to_record(payload), reply_to=msg)


@client_app.train(mods=[guarded_secaggplus(node_party)])
def secure_route(msg: FlowerMessage, context: Context) -> FlowerMessage:
    """Flower's SecAgg+ rounds (message type ``train``, masked by ``secaggplus_mod`` behind the
    client's checks, ``fedpgm.federation.secagg_guard``): the fedpgm
    request inside runs through the same handlers, policy and audit as any other."""
    from fedpgm.federation.secagg import client_reply

    handlers = load_handlers(handlers_path(str(context.run_config["handlers"])))
    ctx = node_context(context)
    ctx.secure = True  # a share of a secure sum: what a policy requiring secure aggregation allows
    reply = client_reply(msg, lambda request: handlers.handle(request, ctx))
    keep(ctx)
    return reply

