#!/usr/bin/env bash
# Joins the shards in $OUT/shard-*/ into $OUT/merged/ (byte-identical to one unsharded sweep).
# Slurm: submit after the array job with --dependency=afterok:<array job id>;
# Kubernetes: run after the Indexed Job completes (see kubernetes/sweep-job.yaml).
set -euo pipefail
: "${OUT:?set OUT to the folder the shards wrote}"
PDSIM="${PDSIM:-pdsim}"
shopt -s nullglob
shards=("$OUT"/shard-*)
if [[ ${#shards[@]} -eq 0 ]]; then
  echo "merge.sh: no $OUT/shard-*/ folder" >&2
  exit 2
fi
exec "$PDSIM" merge "${shards[@]}" --out "$OUT/merged"
