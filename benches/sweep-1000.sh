#!/usr/bin/env bash
# Issue 12's sweep benchmark: a 1,000-point grid of 10,000-request points (10 rates × 10 prefill
# counts × 10 decode counts of the quickstart's 8B pools), one seed, summary-only per point.
# Usage: benches/sweep-1000.sh [JOBS]   (prints wall and CPU seconds; run from the repo root)
set -euo pipefail
jobs=${1:-2}
cargo build --release -q
out=$(mktemp -d)
/usr/bin/time -f "sweep-1000: %e s wall, %U s user, %S s sys, %M KB peak (jobs=$jobs)" \
  target/release/pdsim sweep scenarios/quickstart.toml \
  --set run.max_requests=10000 --set run.duration_s=100000 \
  --vary workload.arrival.rate_per_s=10,15,20,25,30,35,40,45,50,55 \
  --vary pools.prefill.instances=1,2,3,4,5,6,7,8,9,10 \
  --vary pools.decode.instances=1,2,3,4,5,6,7,8,9,10 \
  --jobs "$jobs" --out "$out" >/dev/null
wc -l < "$out/sweep.csv" | sed 's/^/rows incl. header: /'
rm -rf "$out"
