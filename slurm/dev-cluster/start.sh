#!/usr/bin/env bash
# Start (or confirm) a real single-node Slurm dev cluster on this machine, without systemd.
#
#   bash slurm/dev-cluster/start.sh          # from the repo root; needs root (apt-get, mknod, daemons)
#
# What it does, idempotently (a second run on a healthy cluster changes nothing and takes ~1.5 s):
#   - installs Debian's slurm-wlm 22.05 pieces (slurmctld, slurmd, slurm-client), munge and, for
#     ACCOUNTING=slurmdbd, slurmdbd + mariadb-server, if missing;
#   - writes /etc/slurm/{slurm,gres,slurmdbd}.conf for this host with FAKE_GPUS fake GPUs (gres.conf on
#     `mknod c 1 3` device files, i.e. clones of /dev/null: the GPUs only exist for the scheduler);
#   - starts munged, [mariadbd (private datadir), slurmdbd,] slurmctld, slurmd as foreground-mode daemons
#     in their own sessions, records their PIDs in $RUN_DIR, and waits until the node is schedulable.
#
# Env knobs (see slurm/README.md):
#   SLURM_BASE   state/log dir                      default: <repo>/.slurm-dev (git-ignored)
#   FAKE_GPUS    fake GPUs on the node (0 = none)   default: 8   (8-GPU dry-run sweeps + dedicated scorer)
#   FAKE_CPUS    CPUs the node advertises           default: 64  (Ray asks 3*G+10 CPUs per task; "" = real)
#   FAKE_MEM_GB  memory the node advertises (GB)    default: 1024 ("" = 95% of real); nothing enforces it
#   PARTITION    the (default) partition name       default: debug
#   ACCOUNTING   slurmdbd | none                    default: slurmdbd (submitit needs sacct, see below)
#   START_TIMEOUT_S  bound on each wait-for-daemon  default: 60
#
# Why slurmdbd: submitit polls `sacct` for jobs that left the queue. Without accounting a job that dies
# before writing its result (OOM, SIGKILL, node failure) is never seen as finished and job.result() hangs.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
SLURM_BASE=${SLURM_BASE:-$REPO/.slurm-dev}
FAKE_GPUS=${FAKE_GPUS-8}
FAKE_CPUS=${FAKE_CPUS-64}
FAKE_MEM_GB=${FAKE_MEM_GB-1024}
PARTITION=${PARTITION:-debug}
ACCOUNTING=${ACCOUNTING:-slurmdbd}
START_TIMEOUT_S=${START_TIMEOUT_S:-60}
CONF_DIR=/etc/slurm
# PIDs live in one machine-wide place: ports, /etc/slurm and the munge key are machine-wide too, so a
# second checkout (CI's fresh clone, another worktree) must see the daemons the first one started.
RUN_DIR=${RUN_DIR:-/run/slurm-dev-cluster}
LOG=$SLURM_BASE/log
CLUSTER=devcluster

ts() { date +%s.%N; }
since() { awk -v a="$(ts)" -v b="$1" 'BEGIN{printf "%.1f", a-b}'; }
T_START=$(ts)
exec 3>&1  # log() writes here, so it still shows from inside checks whose output wait_for hides
log() { echo "[dev-cluster $(date +%T)] $*" >&3; }
die() { echo "[dev-cluster $(date +%T)] ERROR: $*" >&2; exit 1; }

[[ "$(id -u)" == 0 ]] || die "must run as root (installs Debian packages, writes /etc/slurm, mknod, starts daemons); try: sudo bash $0"
[[ "$ACCOUNTING" == slurmdbd || "$ACCOUNTING" == none ]] || die "ACCOUNTING must be slurmdbd or none, not '$ACCOUNTING'"
[[ "$FAKE_GPUS" =~ ^[0-9]+$ ]] || die "FAKE_GPUS must be a number, not '$FAKE_GPUS'"
[[ -z "$FAKE_CPUS" || "$FAKE_CPUS" =~ ^[1-9][0-9]*$ ]] || die "FAKE_CPUS must be a positive number or empty"
[[ -z "$FAKE_MEM_GB" || "$FAKE_MEM_GB" =~ ^[1-9][0-9]*$ ]] || die "FAKE_MEM_GB must be a positive number or empty"

mkdir -p "$RUN_DIR"
# one start at a time on this machine: two (two test workers' fixtures, a second checkout's CI) would
# write the same /etc/slurm files and start the same daemons at once; the second then finds the first's
# cluster healthy. flock(1) is util-linux's, as unshare.
# The daemons started below inherit fd 9; unlocking at exit releases the lock for every copy of it.
exec 9>"$RUN_DIR/start.lock"
flock 9
trap 'flock -u 9 2>/dev/null || true' EXIT

# alive NAME: the recorded PID runs and really is that daemon (a stale pid file after a reboot or a
# killed session may point at an unrelated process that reused the PID).
alive() {
  local f="$RUN_DIR/$1.pid" pid
  [[ -s "$f" ]] || return 1
  pid=$(cat "$f")
  [[ -r /proc/$pid/comm && "$(cat "/proc/$pid/comm")" == "$1" ]]
}
# spawn NAME CMD...: run a daemon in the foreground mode (-D) in its own session, so a Ctrl-C in the
# terminal or pytest that ran this script does not take the cluster down; no stdin, output to the log,
# and fd 3 closed: a daemon holding the caller's stdout pipe would make `start.sh | tail` or
# subprocess.run(capture_output=True) wait forever for EOF.
spawn() {
  local name=$1; shift
  setsid "$@" </dev/null >"$LOG/$name.out" 2>&1 3>&- &
  echo $! >"$RUN_DIR/$name.pid"
}
# wait_for DESC CMD...: poll CMD every 0.2 s until it succeeds, at most START_TIMEOUT_S.
wait_for() {
  local desc=$1; shift
  local deadline=$(($(date +%s) + START_TIMEOUT_S))
  until "$@" >/dev/null 2>&1; do
    (($(date +%s) < deadline)) || { log "$desc: not ready after ${START_TIMEOUT_S}s"; return 1; }
    sleep 0.2
  done
}

# ---------------------------------------------------------------- another checkout's cluster?
# The knobs that shape what jobs can ask for. If a cluster started from another SLURM_BASE runs with the
# same knobs we reuse it (someone may have jobs on it); with other knobs we take it over.
HOST=$(hostname -s)
KNOBS="host=$HOST gpus=$FAKE_GPUS cpus=$FAKE_CPUS mem_gb=$FAKE_MEM_GB partition=$PARTITION accounting=$ACCOUNTING"
if [[ -s "$RUN_DIR/owner" ]] && alive slurmctld; then
  owner_base=$(sed -n 's/^base=//p' "$RUN_DIR/owner")
  owner_knobs=$(sed -n 's/^knobs=//p' "$RUN_DIR/owner")
  if [[ "$owner_base" != "$SLURM_BASE" ]]; then
    if [[ "$owner_knobs" == "$KNOBS" ]] && scontrol ping 2>/dev/null | grep -q UP; then
      log "reusing the dev cluster started from $owner_base ($KNOBS); its logs are in $owner_base/log"
      sinfo
      exit 0
    fi
    log "a dev cluster from $owner_base runs with other knobs ($owner_knobs): stopping it"
    SLURM_BASE=$owner_base bash "$HERE/stop.sh"
  fi
fi

mkdir -p "$LOG" "$SLURM_BASE/spool/ctld" "$SLURM_BASE/spool/d" "$SLURM_BASE/fakegpu"

# ---------------------------------------------------------------- install
PKGS=(slurmctld slurmd slurm-client munge)
[[ "$ACCOUNTING" == slurmdbd ]] && PKGS+=(slurmdbd mariadb-server mariadb-client)
need_pkgs=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need_pkgs+=("$p")
done
if ((${#need_pkgs[@]})); then
  command -v apt-get >/dev/null || die "missing packages (${need_pkgs[*]}) and no apt-get to install them"
  log "installing: ${need_pkgs[*]} (log: $LOG/apt_install.log)"
  T0=$(ts)
  # A policy-rc.d that exits 101 stops the packages' postinst from starting the services through
  # /etc/init.d (there is no systemd here, and we start the daemons ourselves with our own config).
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d; flock -u 9 2>/dev/null || true' EXIT
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt_install() { apt-get install -y -q --no-install-recommends -o Dpkg::Options::=--force-confold "${need_pkgs[@]}" </dev/null; }
  # Try the package lists we have first (fast); refresh them only if that fails (fresh machine).
  if ! apt_install >"$LOG/apt_install.log" 2>&1; then
    log "install from the current package lists failed; running apt-get update and retrying"
    { apt-get update -q && apt_install; } >>"$LOG/apt_install.log" 2>&1 \
      || { tail -20 "$LOG/apt_install.log" >&2; die "apt-get install failed (see $LOG/apt_install.log)"; }
  fi
  log "install took $(since "$T0") s"
fi

# ---------------------------------------------------------------- munge
if [[ ! -s /etc/munge/munge.key ]]; then
  log "creating munge key"
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
fi
chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /var/log/munge /var/lib/munge
munge_ok() { munge -n </dev/null | unmunge >/dev/null; }
if alive munged && munge_ok 2>/dev/null; then
  log "munged already running (pid $(cat "$RUN_DIR/munged.pid"))"
else
  log "starting munged"
  spawn munged setpriv --reuid=munge --regid=munge --init-groups -- /usr/sbin/munged --foreground --force
  wait_for munged munge_ok || { cat "$LOG/munged.out" >&2; die "munge does not work"; }
fi

# ---------------------------------------------------------------- config
# slurmd -C prints the real hardware: NodeName=.. CPUs=.. Boards=.. SocketsPerBoard=.. CoresPerSocket=..
# ThreadsPerCore=.. RealMemory=..
HW=$(slurmd -C | head -1)
REALMEM=$(sed -E 's/.*RealMemory=([0-9]+).*/\1/' <<<"$HW")
OVERRIDES=""
if [[ -n "$FAKE_CPUS" ]]; then
  # One socket of FAKE_CPUS single-thread cores: with CR_Core a --cpus-per-task=C asks for C cores.
  NODE_HW="CPUs=$FAKE_CPUS Boards=1 SocketsPerBoard=1 CoresPerSocket=$FAKE_CPUS ThreadsPerCore=1"
else
  NODE_HW=$(sed -E 's/^NodeName=[^ ]+ //; s/ RealMemory=[0-9]+//' <<<"$HW")
fi
if [[ -n "$FAKE_MEM_GB" ]]; then
  MEM=$((FAKE_MEM_GB * 1024))
else
  MEM=$((REALMEM * 95 / 100))  # slack, so the node never drains for "Low RealMemory"
fi
# config_overrides: slurmd registers the configured CPUs/memory instead of the real ones; without it
# a node that advertises more than it has is drained ("Low socket*core*thread count", "Low RealMemory").
# Nothing enforces either limit here (task/none, no cgroups, no OverMemoryKill), so jobs are not killed.
if [[ -n "$FAKE_CPUS" || -n "$FAKE_MEM_GB" ]]; then OVERRIDES="SlurmdParameters=config_overrides"; fi

GRES_TYPES=""; GRES_LINE=""
if ((FAKE_GPUS > 0)); then
  GRES_TYPES="GresTypes=gpu"
  GRES_LINE="Gres=gpu:$FAKE_GPUS"
  # slurmd wants a char/block device per GPU: mknod clones of /dev/null (major 1, minor 3). Slurm
  # numbers the GPUs by the trailing digits of the file names, which gives CUDA_VISIBLE_DEVICES=0,1,..
  for i in $(seq 0 $((FAKE_GPUS - 1))); do
    f="$SLURM_BASE/fakegpu/nvidia$i"
    [[ -c "$f" ]] || { rm -f "$f"; mknod -m 666 "$f" c 1 3; }
  done
  GPU_FILES="$SLURM_BASE/fakegpu/nvidia[0-$((FAKE_GPUS - 1))]"
  ((FAKE_GPUS == 1)) && GPU_FILES="$SLURM_BASE/fakegpu/nvidia0"
  cat >"$CONF_DIR/gres.conf.new" <<EOF
# generated by slurm/dev-cluster/start.sh: FAKE gpus, for scheduling tests only (no hardware)
AutoDetect=off
NodeName=$HOST Name=gpu File=$GPU_FILES
EOF
else
  echo "# generated by slurm/dev-cluster/start.sh: no gres" >"$CONF_DIR/gres.conf.new"
fi

if [[ "$ACCOUNTING" == slurmdbd ]]; then
  ACCT="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
AccountingStorageTRES=gres/gpu
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30"
else
  ACCT="AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none"
fi

# FirstJobId. Slurm restarts job ids at FirstJobId when its state dir is new, and submitit/hydra folders
# named after %j would then meet stale result files of an earlier cluster. A state dir keeps its own
# counter (slurmctld recovers it from StateSaveLocation and never goes below FirstJobId). So FirstJobId is
# at least (a) a clock-based floor for a new state dir (one id per 10 s since 2023-11; this stays under
# Slurm's MaxJobId for decades) and (b) the next id the last cluster on this machine had when stop.sh
# stopped it (another checkout's, or this one before --purge). (b) is only applied when slurmctld is
# about to start anyway, so it never forces a restart of a running cluster.
hint=$(cat /var/lib/slurm-dev-cluster/next_job_id 2>/dev/null || echo 0)
[[ "$hint" =~ ^[0-9]+$ ]] || hint=0
if [[ ! -s "$SLURM_BASE/first_job_id" ]]; then
  floor=$(( ($(date +%s) - 1700000000) / 10 + 1000 ))
  echo $((hint > floor ? hint : floor)) >"$SLURM_BASE/first_job_id"
elif ! alive slurmctld && ((hint > $(cat "$SLURM_BASE/first_job_id"))); then
  echo "$hint" >"$SLURM_BASE/first_job_id"
fi
FIRST_JOB_ID=$(cat "$SLURM_BASE/first_job_id")

cat >"$CONF_DIR/slurm.conf.new" <<EOF
# generated by slurm/dev-cluster/start.sh (state dir $SLURM_BASE) -- edits are overwritten
ClusterName=$CLUSTER
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
MailProg=/bin/true
SwitchType=switch/none
# no systemd / no cgroup delegation in containers -> plain /proc process tracking, no binding
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$SLURM_BASE/spool/ctld
SlurmdSpoolDir=$SLURM_BASE/spool/d
SlurmctldPidFile=$RUN_DIR/slurmctld.daemonpid
SlurmdPidFile=$RUN_DIR/slurmd.daemonpid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ReturnToService=2
# Reject at submission a job that can never run here (e.g. more CPUs than the node has) instead of
# leaving it PENDING (PartitionConfig) forever while submitit/hydra wait on it.
EnforcePartLimits=ALL
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
# finished jobs stay visible to squeue/scontrol for 5 min (sacct keeps them for good)
MinJobAge=300
FirstJobId=$FIRST_JOB_ID
KillWait=5
InactiveLimit=0
Waittime=0
$GRES_TYPES
$OVERRIDES
$ACCT
JobCompType=jobcomp/filetxt
JobCompLoc=$LOG/jobcomp.txt
NodeName=$HOST NodeAddr=127.0.0.1 $NODE_HW RealMemory=$MEM $GRES_LINE State=UNKNOWN
PartitionName=$PARTITION Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF

for f in slurm.conf gres.conf; do
  if ! cmp -s "$CONF_DIR/$f.new" "$CONF_DIR/$f"; then mv "$CONF_DIR/$f.new" "$CONF_DIR/$f"; else rm -f "$CONF_DIR/$f.new"; fi
done
CONF_SHA=$(cat "$CONF_DIR/slurm.conf" "$CONF_DIR/gres.conf" | sha256sum | cut -c1-16)

# ---------------------------------------------------------------- mariadb + slurmdbd
if [[ "$ACCOUNTING" == slurmdbd ]]; then
  DB_PASS=slurmdbpass   # a throw-away local password: mariadb listens on 127.0.0.1 only
  install -d -o mysql -g mysql -m 0755 /run/mysqld
  DATADIR=$SLURM_BASE/mysql
  install -d -o mysql -g mysql -m 0750 "$DATADIR"
  if [[ ! -d "$DATADIR/mysql" ]]; then
    log "initialising private mariadb datadir $DATADIR"
    mariadb-install-db --user=mysql --datadir="$DATADIR" --skip-test-db >"$LOG/mariadb-install.log" 2>&1 \
      || { tail -20 "$LOG/mariadb-install.log" >&2; die "mariadb-install-db failed"; }
  fi
  if alive mariadbd; then
    log "mariadbd already running (pid $(cat "$RUN_DIR/mariadbd.pid"))"
  else
    log "starting mariadbd"
    spawn mariadbd /usr/sbin/mariadbd --user=mysql --datadir="$DATADIR" --socket=/run/mysqld/mysqld.sock \
      --bind-address=127.0.0.1 --port=3306 --pid-file=/run/mysqld/mysqld.pid --innodb-buffer-pool-size=64M
  fi
  wait_for mariadbd mariadb -uroot -e 'select 1' || { tail -20 "$LOG/mariadbd.out" >&2; die "mariadb did not come up"; }
  mariadb -uroot -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
  cat >"$CONF_DIR/slurmdbd.conf.new" <<EOF
# generated by slurm/dev-cluster/start.sh
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=root
DebugLevel=info
LogFile=$LOG/slurmdbd.log
PidFile=$RUN_DIR/slurmdbd.daemonpid
StorageType=accounting_storage/mysql
StorageHost=localhost
StoragePort=3306
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
EOF
  chmod 600 "$CONF_DIR/slurmdbd.conf.new"   # slurmdbd refuses a world-readable config with a password
  if ! cmp -s "$CONF_DIR/slurmdbd.conf.new" "$CONF_DIR/slurmdbd.conf"; then
    mv "$CONF_DIR/slurmdbd.conf.new" "$CONF_DIR/slurmdbd.conf"
    if alive slurmdbd; then log "slurmdbd.conf changed: restarting slurmdbd"; SLURM_BASE=$SLURM_BASE bash "$HERE/stop.sh" --only slurmdbd; fi
  else
    rm -f "$CONF_DIR/slurmdbd.conf.new"
  fi
  if alive slurmdbd; then
    log "slurmdbd already running (pid $(cat "$RUN_DIR/slurmdbd.pid"))"
  else
    log "starting slurmdbd"
    spawn slurmdbd /usr/sbin/slurmdbd -D
  fi
  wait_for slurmdbd sacctmgr -n show cluster || { tail -20 "$LOG/slurmdbd.log" >&2; die "slurmdbd did not come up"; }
  sacctmgr -n -P show cluster format=cluster 2>/dev/null | grep -qx "$CLUSTER" \
    || sacctmgr -i add cluster "$CLUSTER" >/dev/null
fi

# ---------------------------------------------------------------- slurmctld + slurmd
if alive slurmctld && [[ "$(cat "$RUN_DIR/conf.sha" 2>/dev/null)" != "$CONF_SHA" ]]; then
  # slurmd must re-register its (new) gres/cpus, and `scontrol reconfigure` does not change node
  # definitions: restart both. Queued jobs survive in the state dir.
  log "slurm.conf/gres.conf changed: restarting slurmctld and slurmd"
  SLURM_BASE=$SLURM_BASE bash "$HERE/stop.sh" --only slurmd,slurmctld
fi

T_D=$(ts)
if alive slurmctld; then
  log "slurmctld already running (pid $(cat "$RUN_DIR/slurmctld.pid"))"
else
  log "starting slurmctld"
  # no -c: the state in StateSaveLocation is recovered, so job ids keep increasing across restarts
  spawn slurmctld /usr/sbin/slurmctld -D
  echo "$CONF_SHA" >"$RUN_DIR/conf.sha"
fi
printf 'base=%s\nknobs=%s\n' "$SLURM_BASE" "$KNOBS" >"$RUN_DIR/owner"
ctld_up() { scontrol ping | grep -q UP; }
wait_for slurmctld ctld_up || { tail -30 "$LOG/slurmctld.log" "$LOG/slurmctld.out" >&2; die "slurmctld did not come up"; }

if alive slurmd; then
  log "slurmd already running (pid $(cat "$RUN_DIR/slurmd.pid"))"
else
  log "starting slurmd"
  spawn slurmd /usr/sbin/slurmd -D
fi

# ---------------------------------------------------------------- wait until schedulable
node_state() { sinfo -h -n "$HOST" -o '%t' 2>/dev/null | head -1; }
resumed=0
node_ready() {
  local st; st=$(node_state)
  # a trailing '*' means "not responding": slurmctld recovered the node from its state before slurmd
  # re-registered, and jobs would sit pending until it does
  [[ "$st" != *'*'* && "$st" =~ ^(idle|mix|alloc|comp) ]] && return 0
  # drained/down after an earlier unclean stop (ReturnToService=2 covers "down", not "drain"): resume once
  if [[ "$st" =~ ^(drain|drng|down|inval|fail) ]] && ((!resumed)); then
    log "node state '$st': resuming it"; resumed=1
    scontrol update nodename="$HOST" state=resume >/dev/null 2>&1 || true
  fi
  return 1
}
wait_for "node $HOST" node_ready || {
  scontrol show node "$HOST" >&2; tail -20 "$LOG/slurmd.log" >&2; die "node $HOST not schedulable (state '$(node_state)')"; }
sinfo
log "cluster up: daemons start->schedulable $(since "$T_D") s, script total $(since "$T_START") s"
log "knobs: $KNOBS; first job id $FIRST_JOB_ID; state dir $SLURM_BASE"
log "pids: $(for n in munged mariadbd slurmdbd slurmctld slurmd; do alive $n && printf '%s=%s ' $n "$(cat "$RUN_DIR/$n.pid")"; done)"
