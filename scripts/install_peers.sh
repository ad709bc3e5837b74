#!/usr/bin/env bash
# The FedPC paper's peers for benchmarks/fedpc_classification.py --peers (optional):
# FedTree 1.0.5 and pytorch-tabnet 4.1.0 in .venv, SPFlow and libcirkit for the circuit benchmarks, and the Debian libraries FedTree's
# prebuilt library links against (NTL, gf2x) unpacked into .venv/peer-libs (no root needed).
set -euo pipefail
cd "$(dirname "$0")/.."
make setup
.venv/bin/python -m pip install --quiet -c constraints.txt -e '.[peers,bench]'
# libcirkit (benchmarks/pc_images_peer.py) pins scipy~=1.14, which conflicts with ours: without
# its dependencies (opt_einsum, einops, graphviz come with the bench extra)
.venv/bin/python -m pip install --quiet --no-deps libcirkit==0.3.1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download libntl44 libgf2x3)
rm -rf .venv/peer-libs
for deb in "$tmp"/*.deb; do dpkg -x "$deb" .venv/peer-libs; done
.venv/bin/python -c "from fedpgm.baselines.fedtree import load_fedtree; load_fedtree(); print('FedTree ready')"
