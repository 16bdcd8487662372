#!/usr/bin/env bash
# The inner loop: the library's unit tests (the store's, the recorder's, the faces' parsing)
# and the recorder's model test, with no server to install and no browser. Under a minute
# after a build; `scripts/test.sh` runs everything.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --lib "$@"
cargo test --test durability "$@" -- model::
