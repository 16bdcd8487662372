#!/usr/bin/env bash
# The inner loop: the library's unit tests (the store's, the recorder's, the faces' parsing)
# and the recorder's model test, with no server to install and no browser. Under a minute
# after a build; `scripts/test.sh` runs everything.
set -euo pipefail
cd "$(dirname "$0")/.."
# A thousand power cuts rather than the full run's ten thousand, and 50 cluster seeds rather than
# 1,000 (see docs/testing.md).
TAPEDECK_SIM_CUTS="${TAPEDECK_SIM_CUTS:-1000}" TAPEDECK_SIM_CLUSTER_SEEDS="${TAPEDECK_SIM_CLUSTER_SEEDS:-50}" \
    cargo test --lib "$@"
cargo test --test durability "$@" -- model::
