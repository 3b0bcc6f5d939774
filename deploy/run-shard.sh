#!/usr/bin/env bash
# Runs one shard of a pdsim sweep. The shard index comes from the scheduler:
#   Slurm array job:          SLURM_ARRAY_TASK_ID (0-based: submit with --array=0-(N-1))
#   Kubernetes Indexed Job:   JOB_COMPLETION_INDEX
#   anything else:            SHARD_INDEX
# and the shard count from SHARDS (or SLURM_ARRAY_TASK_COUNT).
#
# Required: SCENARIO (the scenario file), OUT (a folder every shard and the merge can reach),
#           VARY (the --vary arguments, e.g. "pools.decode.instances=1,2,4 pools.decode.server.tp_size=4,8").
# Optional: SEEDS (default 1), JOBS (threads per shard; default all cores), PDSIM (the binary),
#           SETS (--set arguments, space-separated KEY=VALUE).
# Shard I writes $OUT/shard-I/ ; `merge.sh` (or `pdsim merge`) joins them into $OUT/merged/.
set -euo pipefail
INDEX="${SLURM_ARRAY_TASK_ID:-${JOB_COMPLETION_INDEX:-${SHARD_INDEX:?set SHARD_INDEX, SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX}}}"
COUNT="${SHARDS:-${SLURM_ARRAY_TASK_COUNT:?set SHARDS (or SLURM_ARRAY_TASK_COUNT) to the number of shards}}"
: "${SCENARIO:?set SCENARIO to the scenario file}"
: "${OUT:?set OUT to a shared output folder}"
: "${VARY:?set VARY to the --vary arguments}"
PDSIM="${PDSIM:-pdsim}"
args=(sweep "$SCENARIO" --seeds "${SEEDS:-1}" --shard "$INDEX/$COUNT" --out "$OUT/shard-$INDEX" -q)
for v in $VARY; do args+=(--vary "$v"); done
for s in ${SETS:-}; do args+=(--set "$s"); done
if [[ -n "${JOBS:-}" ]]; then args+=(--jobs "$JOBS"); fi
exec "$PDSIM" "${args[@]}"
