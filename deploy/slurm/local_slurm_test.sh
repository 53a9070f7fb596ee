#!/usr/bin/env bash
# deploy/slurm/pstrain.sbatch run by a real Slurm on this one machine:
# Debian's slurmctld, slurmd and munge (22.05), five nodes served by five
# slurmd processes (cpu: n1-n3; gpu: g1-g2, each declaring one GPU whose
# device is a stand-in, /dev/null, since the workers run on the CPU here).
# It submits the script with the bundle as PSTRAIN_HOME and the CPU MLP,
# a token on, and checks:
#   1. the job COMPLETED (scontrol, and sacct for each of its three
#      components, recorded by a slurmdbd on a MariaDB of its own), exit
#      code 0, the scheduler's final
#      status DONE with every member FINISHED, the workers' test accuracy
#      that of the same job on a local cluster (BSP: equal) and at least
#      0.85, checkpoints in PSTRAIN_CKPT;
#   2. scancel of a running job leaves no pstrain process behind, and
#      sacct records it CANCELLED;
#   3. resubmitting with the cancelled job's PSTRAIN_CKPT resumes it from
#      its checkpoint (Status start_clock > 0) and completes with the
#      undisturbed job's accuracy.
# Prints a line per fact; ends with "slurm: N passed, M failed".
#
#   deploy/slurm/local_slurm_test.sh [--bundle=DIR] [--dir=DIR] [--keep]
#
# Needs root. Installs slurmctld, slurmd, slurmdbd, slurm-client, munge and
# mariadb-server with apt-get when missing. --bundle: an existing
# deploy/bundle.sh output (default: builds one in DIR/bundle). --keep:
# leaves the daemons running. Where this machine cannot host Slurm (not
# root, no apt, no daemon starts) it prints "slurm: skipped: REASON" and
# exits 77.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
DIR=/tmp/pstrain-slurm
BUNDLE=""
KEEP=0
for arg in "$@"; do
  case "$arg" in
    --bundle=*) BUNDLE="${arg#*=}" ;;
    --dir=*) DIR="${arg#*=}" ;;
    --keep) KEEP=1 ;;
    *) echo "local_slurm_test: unknown argument $arg" >&2; exit 2 ;;
  esac
done
skip() { echo "slurm: skipped: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (munge, slurmd)"
PASSED=0 FAILED=0
check() {  # check NAME COMMAND...: one fact
  if "${@:2}"; then echo "slurm: $1: passed"; PASSED=$((PASSED + 1));
  else echo "slurm: $1: FAILED"; FAILED=$((FAILED + 1)); fi
}

# munge's package and munged run as the munge user, and munged wants "/"
# searchable by all: a root folder made by mktemp (a chroot's) is not.
case "$(stat -c %A /)" in d??x??x??x) ;; *) chmod a+x / ;; esac
PACKAGES=(slurmctld slurmd slurmdbd slurm-client munge mariadb-server)
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" && continue
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" \
    >"/tmp/pstrain-slurm-apt.log" 2>&1 || skip "apt-get install of ${PACKAGES[*]} failed"
  break
done
mkdir -p "$DIR"
if [ -z "$BUNDLE" ]; then
  BUNDLE="$DIR/bundle"
  "$ROOT/deploy/bundle.sh" --out="$BUNDLE" >"$DIR/bundle.log" 2>&1 ||
    { echo "local_slurm_test: deploy/bundle.sh failed (see $DIR/bundle.log)" >&2; exit 1; }
fi

# --- a one-machine Slurm cluster ------------------------------------------
export SLURM_CONF="$DIR/etc/slurm.conf"
stop_slurm() {
  for pid in "$DIR"/run/*.pid; do [ -f "$pid" ] && kill "$(cat "$pid")" 2>/dev/null; done
  rm -f "$DIR"/run/*.pid
  sleep 1
}
stop_slurm
rm -rf "$DIR/etc" "$DIR/run" "$DIR/state" "$DIR/spool" "$DIR/log" "$DIR/munge" "$DIR/db"
mkdir -p "$DIR/etc" "$DIR/run" "$DIR/state" "$DIR/spool" "$DIR/log" "$DIR/db"
[ "$KEEP" = 1 ] || trap stop_slurm EXIT
HOST="$(hostname)"
cat >"$SLURM_CONF" <<EOF
ClusterName=pstrain-local
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=16817
SlurmdPort=16818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=16819
AccountingStoragePass=$DIR/munge/socket
MinJobAge=3600
KillWait=30
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
GresTypes=gpu
NodeName=n[1-3] NodeHostname=$HOST NodeAddr=127.0.0.1 Port=[17001-17003] CPUs=8 RealMemory=32768 State=UNKNOWN
NodeName=g[1-2] NodeHostname=$HOST NodeAddr=127.0.0.1 Port=[17004-17005] CPUs=8 RealMemory=32768 Gres=gpu:1 State=UNKNOWN
PartitionName=cpu Nodes=n[1-3] Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
PartitionName=gpu Nodes=g[1-2] MaxTime=INFINITE State=UP OverSubscribe=FORCE
EOF
echo "NodeName=g[1-2] Name=gpu File=/dev/null" >"$DIR/etc/gres.conf"
# slurmd wants a cgroup filesystem, which a chroot's /sys may lack: then
# the cgroup v1 hierarchies of the processes' own /proc/self/cgroup, which
# slurmd mounts on a tmpfs there.
if [ "$(stat -f -c %T /sys/fs/cgroup 2>/dev/null)" = sysfs ]; then
  mount -t tmpfs cgroup /sys/fs/cgroup
  printf '%s\n' "CgroupPlugin=cgroup/v1" "CgroupAutomount=yes" >"$DIR/etc/cgroup.conf"
fi
# Accounting, for sacct: a MariaDB of its own (TCP on 127.0.0.1 only, no
# name lookups: a chroot's /etc/hosts may be empty) and a slurmdbd on it.
start_accounting() {
  local pass db="$DIR/db"
  pass="$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  # --force: without it the script gives up where the host name does not resolve.
  mariadb-install-db --force --skip-name-resolve --user=root --datadir="$db/data" \
    --auth-root-authentication-method=socket \
    --skip-test-db >"$DIR/log/mariadb-install.log" 2>&1 || return 1
  /usr/sbin/mariadbd --user=root --datadir="$db/data" --socket="$db/socket" --port=16306 \
    --bind-address=127.0.0.1 --skip-name-resolve --pid-file="$DIR/run/mariadb.pid" \
    --log-error="$DIR/log/mariadb.log" >/dev/null 2>&1 &
  for _ in $(seq 60); do [ -S "$db/socket" ] && break; sleep 1; done
  mariadb --socket="$db/socket" -u root -e "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" || return 1
  cat >"$DIR/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/socket
DbdHost=$HOST
DbdAddr=127.0.0.1
DbdPort=16819
SlurmUser=root
PidFile=$DIR/run/slurmdbd.pid
LogFile=$DIR/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=16306
StorageUser=slurm
StoragePass=$pass
StorageLoc=slurm_acct_db
EOF
  chmod 600 "$DIR/etc/slurmdbd.conf"
  /usr/sbin/slurmdbd  # reads slurmdbd.conf beside $SLURM_CONF
  for _ in $(seq 30); do sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 1; done
  sacctmgr -i add cluster pstrain-local >/dev/null 2>&1
  sacctmgr -n -P list cluster format=cluster | grep -qx pstrain-local
}
# A munged of its own, on a socket of its own (slurm.conf's AuthInfo); the
# munge user must reach it through DIR.
chmod a+x "$DIR"
mkdir -p "$DIR/munge" && chown munge:munge "$DIR/munge"
runuser -u munge -- /usr/sbin/munged --socket="$DIR/munge/socket" \
  --pid-file="$DIR/munge/munged.pid" --seed-file="$DIR/munge/seed" --log-file="$DIR/munge/log"
cp "$DIR/munge/munged.pid" "$DIR/run/munged.pid"
munge -n --socket="$DIR/munge/socket" | unmunge --socket="$DIR/munge/socket" >/dev/null ||
  skip "munged did not start (see $DIR/munge/log)"
start_accounting || skip "MariaDB or slurmdbd did not start (see $DIR/log)"
/usr/sbin/slurmctld -f "$SLURM_CONF"
sleep 1
for node in n1 n2 n3 g1 g2; do /usr/sbin/slurmd -f "$SLURM_CONF" -N "$node"; done
for _ in $(seq 30); do
  [ "$(sinfo -h -o '%T' | sort -u)" = idle ] && break
  sleep 1
done
sinfo
[ "$(sinfo -h -o '%T' | sort -u)" = idle ] || skip "the nodes are not idle (see $DIR/log)"

# --- the job --------------------------------------------------------------
JOB="$DIR/mlp.pbtxt"  # the quick start's MLP, 2 epochs
sed 's/^epochs:.*/epochs: 2/' "$ROOT/deploy/jobs/mlp_fashion_mnist.pbtxt" >"$JOB"
grep -q '^epochs: 2' "$JOB" || echo "epochs: 2" >>"$JOB"
TOKEN="$DIR/token"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$TOKEN"
chmod 600 "$TOKEN"
submit() {  # submit CKPT: the job id (the script ends when sbatch fails)
  local id
  id="$(cd "$DIR" && PSTRAIN_HOME="$BUNDLE" PSTRAIN_JOB="$JOB" PSTRAIN_CKPT="$1" \
    PSTRAIN_TOKEN="$TOKEN" PSTRAIN_DEVICE=cpu PSTRAIN_PORTS=any \
    sbatch --parsable "$ROOT/deploy/slurm/pstrain.sbatch")"
  [ -n "$id" ] || { echo "local_slurm_test: sbatch failed" >&2; exit 1; }
  echo "$id"
}
state_of() { scontrol show job "$1" | grep -o 'JobState=[A-Z_]*' | head -n1 | cut -d= -f2; }
wait_for() {  # wait_for JOB SECONDS: its state once it ended (or the last seen)
  local s
  for _ in $(seq "$2"); do
    s="$(state_of "$1")"
    case "$s" in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) break ;; esac
    sleep 1
  done
  echo "$s"
}
sacct_states() {  # sacct_states JOB STATE: each component's "ID STATE EXIT", once all are STATE
  local out
  for _ in $(seq 30); do  # slurmctld hands records to slurmdbd asynchronously
    out="$(sacct -n -X -P -j "$1" -o JobID,State,ExitCode | tr '|' ' ')"
    [ "$(echo "$out" | awk '{print $2}' | sort -u)" = "$2" ] && [ "$(echo "$out" | wc -l)" = 3 ] && break
    sleep 1
  done
  echo "$out"
}
status_fact() {  # status_fact FILE EXPR: prints EXPR of the status JSON
  python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print($2)" "$1"
}

CKPT="$DIR/ckpt-1"
rm -rf "$CKPT"
ID="$(submit "$CKPT")" || exit 1
echo "slurm: submitted job $ID"
STATE="$(wait_for "$ID" 600)"
scontrol show job "$ID" | grep -E 'JobState|ExitCode' | sed 's/^ */slurm: /'
STATUS="$CKPT/status-$ID.json"
check "job $ID COMPLETED" test "$STATE" = COMPLETED
SACCT="$(sacct_states "$ID" COMPLETED)"
echo "$SACCT" | sed 's/^/slurm: sacct: /'
check "sacct: its 3 components COMPLETED 0:0" test "$(echo "$SACCT" | awk '{print $2, $3}' | sort -u | tr '\n' ' ')" = "COMPLETED 0:0 "
check "exit code 0:0" test "$(scontrol show job "$ID" | grep -o 'ExitCode=[0-9:]*' | head -n1)" = ExitCode=0:0
check "scheduler status DONE" test "$(status_fact "$STATUS" 's["job_state"]')" = DONE
check "every member FINISHED" test "$(status_fact "$STATUS" 'sorted({m["state"] for m in s["members"]})')" = "['FINISHED']"
# The same job on a local cluster of the bundle (2 servers, 2 workers,
# BSP): the same weights, so the same accuracy to the last digit.
rm -rf "$DIR/local"
"$BUNDLE/local_cluster.sh" --bin="$BUNDLE/bin" --job="$JOB" --servers=2 --workers=2 \
  --logs="$DIR/local" >"$DIR/local.log" 2>&1
ACC="$(status_fact "$STATUS" 'max(m.get("worker", {}).get("test_accuracy", -1) for m in s["members"])')"
LOCAL="$(status_fact "$DIR/local/status.json" 'max(m.get("worker", {}).get("test_accuracy", -1) for m in s["members"])')"
echo "slurm: test accuracy $ACC; the local cluster's $LOCAL"
check "accuracy that of a local cluster" test "$ACC" = "$LOCAL"
check "accuracy at least 0.85" python3 -c "import sys; sys.exit(float('$ACC') < 0.85)"
check "checkpoints in PSTRAIN_CKPT" test -n "$(ls "$CKPT"/*manifest* 2>/dev/null)"

# scancel of a running job: no pstrain process left behind.
CKPT2="$DIR/ckpt-2"
rm -rf "$CKPT2"
ID2="$(submit "$CKPT2")" || exit 1
for _ in $(seq 120); do
  [ -n "$(ls "$CKPT2"/*manifest* 2>/dev/null)" ] && break
  sleep 1
done
scancel "$ID2"
CANCELLED=$SECONDS
echo "slurm: cancelled job $ID2 after its first checkpoint: $(wait_for "$ID2" 60)"
# Slurm signals SIGTERM, then SIGKILL KillWait (30 s) later.
for _ in $(seq 60); do pgrep -f "$BUNDLE/libexec" >/dev/null || break; sleep 1; done
echo "slurm: pstrain processes left $((SECONDS - CANCELLED)) s after scancel: $(pgrep -cf "$BUNDLE/libexec")"
none_left() { ! pgrep -f "$BUNDLE/libexec" >/dev/null; }
check "scancel: no pstrain process left" none_left
SACCT2="$(sacct_states "$ID2" CANCELLED)"
echo "$SACCT2" | sed 's/^/slurm: sacct: /'
check "sacct: the cancelled job's 3 components CANCELLED" test "$(echo "$SACCT2" | awk '{print $2}' | sort -u | wc -l)$(echo "$SACCT2" | awk '{print $2}' | sort -u)" = "1CANCELLED"

# The same PSTRAIN_CKPT again: the job resumes from its checkpoint.
ID3="$(submit "$CKPT2")" || exit 1
STATE3="$(wait_for "$ID3" 600)"
START="$(status_fact "$CKPT2/status-$ID3.json" 's.get("start_clock", 0)' 2>/dev/null || echo 0)"
echo "slurm: resubmitted as job $ID3: $STATE3, started at clock $START"
check "resumed job COMPLETED" test "$STATE3" = COMPLETED
check "resumed from its checkpoint (start_clock > 0)" test "${START:-0}" -gt 0
ACC3="$(status_fact "$CKPT2/status-$ID3.json" 'max(m.get("worker", {}).get("test_accuracy", -1) for m in s["members"])')"
echo "slurm: the resumed job's test accuracy $ACC3"
check "resumed job's accuracy that of the undisturbed job" test "$ACC3" = "$ACC"

echo "slurm: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
