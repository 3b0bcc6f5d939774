#!/usr/bin/env bash
# The sweep's Slurm path on a real Slurm: installs Slurm from Debian's packages (slurmctld,
# slurmd, munge), writes a one-node slurm.conf for this machine, starts munged, slurmctld and
# slurmd directly (no systemd), submits deploy/slurm/sweep.sbatch as an array job and
# deploy/slurm/merge.sbatch with --dependency=afterok, waits, and checks that the merged sweep
# is byte for byte the unsharded sweep of the same grid. Exit 0 when it is, non-zero
# otherwise (the daemons' and jobs' logs are printed); the daemons are stopped either way.
#
#   deploy/slurm/test-real-slurm.sh            # as root (apt-get and the daemons need it)
#
# Env: PDSIM (the binary; default target/release/pdsim, built if missing), SHARDS (default 4),
# KEEP=1 keeps the work folder, SLURM_TIMEOUT_S (default 600) bounds the wait for the jobs.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PDSIM="${PDSIM:-$ROOT/target/release/pdsim}"
SHARDS="${SHARDS:-4}"
TIMEOUT_S="${SLURM_TIMEOUT_S:-600}"
say() { echo "test-real-slurm: $*" >&2; }

if [[ $(id -u) -ne 0 ]]; then
  say "run as root: it installs packages and starts munged, slurmctld and slurmd"
  exit 2
fi
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null || ! command -v sbatch >/dev/null; then
  say "installing Slurm from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi
if [[ ! -x "$PDSIM" ]]; then
  say "building $PDSIM"
  (cd "$ROOT" && cargo build --release --bin pdsim)
fi

W="$(mktemp -d /tmp/pdsim-slurm.XXXXXX)"
chmod 0755 "$W"
PIDS=()
cleanup() {
  local rc=$?
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
  if [[ $rc -ne 0 ]]; then
    say "FAILED (exit $rc); logs:"
    for f in "$W"/log/*; do [[ -f $f ]] && { echo "==> $f" >&2; tail -n 40 "$f" >&2; }; done
  fi
  if [[ "${KEEP:-0}" == 1 ]]; then say "kept $W"; else rm -rf "$W"; fi
  exit $rc
}
trap cleanup EXIT
mkdir -p "$W"/{etc,log,state,spool,munge,out}
chmod 0711 "$W/munge"

# munge: a key of our own and a socket in the work folder, so a munged already running (or
# none) does not matter.
mungekey --create --keyfile="$W/munge/munge.key" --force
chmod 0400 "$W/munge/munge.key"
munged --foreground --force --key-file="$W/munge/munge.key" --socket="$W/munge/munge.sock" \
  --pid-file="$W/munge/munged.pid" --log-file="$W/log/munged.log" --seed-file="$W/munge/seed" \
  >>"$W/log/munged.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do [[ -S "$W/munge/munge.sock" ]] && break; sleep 0.1; done
[[ -S "$W/munge/munge.sock" ]] || { say "munged did not start"; exit 1; }

# One node: this machine, its cores and memory, as slurmd reports them.
NODE="$(hostname -s)"
CPUS="$(nproc)"
MEM_MB=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 512 ))
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
CTL_PORT=$((20000 + RANDOM % 20000))
until port_free "$CTL_PORT" && port_free $((CTL_PORT + 1)); do CTL_PORT=$((CTL_PORT + 2)); done
export SLURM_CONF="$W/etc/slurm.conf"
cat >"$SLURM_CONF" <<EOF
ClusterName=pdsim-ci
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTL_PORT
SlurmdPort=$((CTL_PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$W/munge/munge.sock
StateSaveLocation=$W/state
SlurmdSpoolDir=$W/spool/slurmd-%n
SlurmctldPidFile=$W/state/slurmctld.pid
SlurmdPidFile=$W/state/slurmd-%n.pid
SlurmctldLogFile=$W/log/slurmctld.log
SlurmdLogFile=$W/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups and no systemd here: track processes by their parent, bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MinJobAge=600
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=ci Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF

slurmctld -D -i -f "$SLURM_CONF" >>"$W/log/slurmctld.out" 2>&1 &
PIDS+=($!)
slurmd -D -N "$NODE" -f "$SLURM_CONF" >>"$W/log/slurmd.out" 2>&1 &
PIDS+=($!)
say "slurmctld and slurmd started (port $CTL_PORT, node $NODE: $CPUS CPUs, $MEM_MB MB)"
for _ in $(seq 300); do
  state="$(sinfo -h -n "$NODE" -o %t 2>/dev/null || true)"
  [[ "$state" == idle* ]] && break
  sleep 0.2
done
[[ "$state" == idle* ]] || { say "the node did not come up idle (state: '${state:-none}')"; sinfo -N -l >&2 || true; exit 1; }

# The grid: small enough for CI, big enough that every shard holds several rows.
export SCENARIO=scenarios/quickstart.toml OUT="$W/out/slurm" SEEDS=2 SHARDS PDSIM \
       VARY="pools.decode.instances=1,2 workload.arrival.rate_per_s=4,8" \
       SETS="run.duration_s=8" PDSIM_DEPLOY="$ROOT/deploy" JOBS=1
cd "$ROOT"
# One CPU per task (this node may have fewer cores than sweep.sbatch asks for); the rest of
# the job's settings are the sbatch file's.
jid=$(sbatch --parsable --array=0-$((SHARDS - 1)) --cpus-per-task=1 --mem=1G \
  --output="$W/log/sweep-%A_%a.log" --export=ALL deploy/slurm/sweep.sbatch)
mid=$(sbatch --parsable --dependency=afterok:"$jid" --mem=1G \
  --output="$W/log/merge-%j.log" --export=ALL deploy/slurm/merge.sbatch)
say "submitted array job $jid (${SHARDS} tasks) and merge job $mid (afterok:$jid)"

# Meanwhile, the same sweep unsharded, outside Slurm.
args=(sweep "$SCENARIO" --seeds "$SEEDS" --out "$W/out/unsharded" --jobs 1 -q)
for v in $VARY; do args+=(--vary "$v"); done
for s in $SETS; do args+=(--set "$s"); done
"$PDSIM" "${args[@]}"

deadline=$((SECONDS + TIMEOUT_S))
while [[ -n "$(squeue -h -j "$jid,$mid" -o %i 2>/dev/null)" ]]; do
  if ((SECONDS > deadline)); then
    say "the jobs did not finish in ${TIMEOUT_S} s"; squeue >&2; exit 1
  fi
  sleep 1
done
job_state() { scontrol -o show job "$1" | tr ' ' '\n' | awk -F= -v k="$2" '$1 == k {print $2}'; }
for t in $(seq 0 $((SHARDS - 1))); do
  s="$(job_state "${jid}_$t" JobState)"; e="$(job_state "${jid}_$t" ExitCode)"
  [[ "$s" == COMPLETED && "$e" == 0:0 ]] || { say "array task ${jid}_$t: $s, exit $e"; exit 1; }
done
s="$(job_state "$mid" JobState)"; e="$(job_state "$mid" ExitCode)"
[[ "$s" == COMPLETED && "$e" == 0:0 ]] || { say "merge job $mid: $s, exit $e"; exit 1; }

for f in sweep.csv sweep.json index.html; do
  if ! cmp "$W/out/unsharded/$f" "$OUT/merged/$f"; then
    say "$f: the merged sweep differs from the unsharded one"
    diff "$W/out/unsharded/$f" "$OUT/merged/$f" | head -20 >&2 || true
    exit 1
  fi
done
rows=$(($(wc -l <"$OUT/merged/sweep.csv") - 1))
say "ok: $SHARDS array tasks + merge (afterok) on Slurm $(sinfo -V | awk '{print $2}') = the unsharded sweep, byte for byte ($rows rows; sweep.csv, sweep.json, index.html)"
