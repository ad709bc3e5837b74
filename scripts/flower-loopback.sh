#!/usr/bin/env bash
# A real multi-process Flower deployment on 127.0.0.1, by hand: one SuperLink, one SuperNode
# per client CSV written by `fedpgm partition`, then `flwr run` of a fedpgm procedure.
#
#   scripts/flower-loopback.sh PARTITION_DIR [PROCEDURE] [HANDLERS]
#   (default: the runtime's reference algorithm, federated mean/covariance)
#
# Every process is started here and stopped by PID at exit. fedpgm.federation.deploy does the
# same from Python (LoopbackDeployment), which the end-to-end tests use.
set -euo pipefail
PARTS=$(cd "$1" && pwd)
PROCEDURE=${2:-fedpgm.federation.reference:federated_moments}
HANDLERS=${3:-fedpgm.federation.reference:HANDLERS}
BIN=$(dirname "$(command -v fedpgm)")
export PATH="$BIN:$PATH" FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1
WORK=$(mktemp -d -t fedpgm-loopback-XXXX)
PORT=${PORT:-9200}
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true' EXIT

FLWR_HOME=$WORK/superlink flower-superlink --insecure --host 127.0.0.1 --port "$PORT" \
  --disable-runtime-dependency-installation > "$WORK/superlink.log" 2>&1 &
PIDS+=($!)
sleep 3

i=0
for csv in "$PARTS"/client-*.csv; do
  case "$csv" in *.test.csv) continue ;; esac
  id=$(basename "$csv" .csv)
  mkdir -p "$WORK/$id"
  FLWR_HOME=$WORK/$id/flwr-home flower-supernode --insecure --superlink "127.0.0.1:$PORT" \
    --host 127.0.0.1 --port $((PORT + 100 + i)) \
    --node-config "client-id=\"$id\" data=\"$csv\" schema=\"$PARTS/manifest.json\" workdir=\"$WORK/$id\"" \
    > "$WORK/supernode-$id.log" 2>&1 &
  PIDS+=($!)
  i=$((i + 1))
done

export FLWR_HOME=$WORK/cli
mkdir -p "$FLWR_HOME"
printf '[superlink]\ndefault = "loopback"\n\n[superlink.loopback]\naddress = "127.0.0.1:%s"\ninsecure = true\n' \
  "$PORT" > "$FLWR_HOME/config.toml"
APP=$(python3 -c 'import fedpgm.federation.apps as a; print(a.app_dir())' 2>/dev/null \
  || "$BIN/python" -c 'import fedpgm.federation.apps as a; print(a.app_dir())')
cat > "$WORK/run.toml" <<TOML
procedure = "$PROCEDURE"
handlers = "$HANDLERS"
clients = $i
result = "$WORK/result.json"
TOML
flwr run "$APP" loopback --stream --run-config "$WORK/run.toml" &
PIDS+=($!)
for _ in $(seq 600); do [ -f "$WORK/result.json" ] && break; sleep 0.5; done
cat "$WORK/result.json"
