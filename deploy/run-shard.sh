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
# VARY and SETS are split into arguments as a shell splits words, quotes included, but never
# expanded or run: quote an argument holding spaces, e.g.
#   VARY="'workload.arrival={ process = \"poisson\", rate_per_s = 4 }' pools.decode.instances=1,2"
# (parsed by xargs, which honours '...', "..." and backslashes and executes nothing).
# Shard I writes $OUT/shard-I/ ; `merge.sh` (or `pdsim merge`) joins them into $OUT/merged/.
set -euo pipefail
INDEX="${SLURM_ARRAY_TASK_ID:-${JOB_COMPLETION_INDEX:-${SHARD_INDEX:?set SHARD_INDEX, SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX}}}"
COUNT="${SHARDS:-${SLURM_ARRAY_TASK_COUNT:?set SHARDS (or SLURM_ARRAY_TASK_COUNT) to the number of shards}}"
: "${SCENARIO:?set SCENARIO to the scenario file}"
: "${OUT:?set OUT to a shared output folder}"
: "${VARY:?set VARY to the --vary arguments}"
PDSIM="${PDSIM:-pdsim}"
args=(sweep "$SCENARIO" --seeds "${SEEDS:-1}" --shard "$INDEX/$COUNT" --out "$OUT/shard-$INDEX" -q)
# One argument per line from xargs' quote-aware split; bash never word-splits "$VARY" itself.
words() { printf '%s' "$1" | xargs -r printf '%s\n'; }
vary_words="$(words "$VARY")" || { echo "run-shard.sh: VARY has an unbalanced quote" >&2; exit 2; }
set_words="$(words "${SETS:-}")" || { echo "run-shard.sh: SETS has an unbalanced quote" >&2; exit 2; }
while IFS= read -r v; do [[ -n "$v" ]] && args+=(--vary "$v"); done <<< "$vary_words"
while IFS= read -r s; do [[ -n "$s" ]] && args+=(--set "$s"); done <<< "$set_words"
if [[ -n "${JOBS:-}" ]]; then args+=(--jobs "$JOBS"); fi
exec "$PDSIM" "${args[@]}"
