#!/usr/bin/env bash
# Stop the dev cluster that slurm/dev-cluster/start.sh started: only the daemons whose PIDs it recorded
# (in $RUN_DIR, checked against their process names), never anything found by name.
#
#   bash slurm/dev-cluster/stop.sh            # cancel jobs, stop slurmd, slurmctld, slurmdbd, mariadbd, munged
#   bash slurm/dev-cluster/stop.sh --purge    # ... and delete the state dir (job history, logs, database)
#   bash slurm/dev-cluster/stop.sh --only slurmd,slurmctld   # used by start.sh on a config change
#
# The next job id is remembered machine-wide (/var/lib/slurm-dev-cluster/next_job_id) so a cluster
# started later from a NEW state dir (--purge, another checkout) does not hand out the same job ids again.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
SLURM_BASE=${SLURM_BASE:-$REPO/.slurm-dev}
RUN_DIR=${RUN_DIR:-/run/slurm-dev-cluster}
STOP_TIMEOUT_S=${STOP_TIMEOUT_S:-15}

only=""; purge=0
while (($#)); do
  case $1 in
    --only) only=$2; shift 2 ;;
    --purge) purge=1; shift ;;
    *) echo "usage: $0 [--purge] [--only name,name]" >&2; exit 2 ;;
  esac
done
log() { echo "[dev-cluster stop $(date +%T)] $*"; }
[[ "$(id -u)" == 0 ]] || { log "must run as root"; exit 1; }

alive() {
  local f="$RUN_DIR/$1.pid" pid
  [[ -s "$f" ]] || return 1
  pid=$(cat "$f")
  [[ -r /proc/$pid/comm && "$(cat "/proc/$pid/comm")" == "$1" ]]
}
stop_pid() {  # NAME: TERM, wait up to STOP_TIMEOUT_S, then KILL
  local name=$1 pid
  if alive "$name"; then
    pid=$(cat "$RUN_DIR/$name.pid")
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq $((STOP_TIMEOUT_S * 5))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then log "$name still alive after ${STOP_TIMEOUT_S}s: KILL"; kill -KILL "$pid"; fi
  fi
  rm -f "$RUN_DIR/$name.pid"
}

if [[ -n "$only" ]]; then
  for n in ${only//,/ }; do stop_pid "$n"; done
  exit 0
fi

if alive slurmctld; then
  # remember where the job ids are (see header)
  next=$(scontrol show config 2>/dev/null | sed -nE 's/^NEXT_JOB_ID *= *([0-9]+).*/\1/p')
  if [[ -n "$next" ]]; then mkdir -p /var/lib/slurm-dev-cluster; echo "$next" >/var/lib/slurm-dev-cluster/next_job_id; fi
  # cancel jobs first, so no slurmstepd or job process outlives slurmd
  jobs=$(squeue -h -o %A 2>/dev/null | paste -sd' ')
  if [[ -n "$jobs" ]]; then
    log "cancelling jobs: $jobs"
    scancel $jobs
    for _ in $(seq 60); do [[ -z "$(squeue -h 2>/dev/null)" ]] && break; sleep 0.5; done
  fi
fi
for n in slurmd slurmctld slurmdbd mariadbd munged; do stop_pid "$n"; done
rm -f "$RUN_DIR/owner" "$RUN_DIR/conf.sha"
if ((purge)); then
  log "deleting state dir $SLURM_BASE"
  rm -rf -- "$SLURM_BASE"
fi
log "stopped"
exit 0
