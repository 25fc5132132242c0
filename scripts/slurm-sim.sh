#!/usr/bin/env bash
# A real single-machine Slurm, for tests and trials (root only): Debian 12's slurm-wlm 22.05
# with munge, one controller (slurmctld) and one node daemon (slurmd) on this machine, one
# partition `ompc` holding this machine with its cores. Jobs then run as on a cluster's
# compute node: `sbatch`, `srun`, `squeue`, and Open MPI's mpirun (hence ompcluster-run)
# inside a job uses the job's allocation.
#
#   bash scripts/slurm-sim.sh up      install (apt) if needed, configure, start; waits until
#                                     the node is idle
#   bash scripts/slurm-sim.sh down    stop the daemons it started, by their pid files (the
#                                     configuration stays)
#
# It writes /etc/slurm/slurm.conf only if that file is missing or was written by this script:
# a machine with a Slurm of its own is left alone.
set -euo pipefail

[ "$(id -u)" -eq 0 ] || { echo "slurm-sim: needs root" >&2; exit 1; }
conf=/etc/slurm/slurm.conf
mark="# written by ompcluster scripts/slurm-sim.sh"

ours() { [ -f "$conf" ] && grep -qF "$mark" "$conf"; }

# Stop the daemons this script's configuration started, by the pids they recorded (the
# configuration names the pid files); a Slurm configured otherwise is left alone.
stop() {
  if ! ours; then
    [ -f "$conf" ] && echo "slurm-sim: $conf was not written by this script: its daemons are left alone" >&2
    return 0
  fi
  local d pid
  for d in slurmd slurmctld; do
    [ -f "/run/$d.pid" ] || continue
    pid=$(cat "/run/$d.pid")
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$d" ] || continue
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
  done
}

case "${1:-}" in
  down) stop; exit 0 ;;
  up) ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac

missing=()
for p in slurm-wlm munge; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "slurm-sim: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ -f "$conf" ] && ! grep -qF "$mark" "$conf"; then
  echo "slurm-sim: $conf exists and was not written by this script: using it as it is" >&2
else
  host=$(hostname -s)
  cpus=$(nproc)
  mem=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
  mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
  cat > "$conf" <<EOF
$mark
ClusterName=ompc
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SchedulerType=sched/backfill
ReturnToService=2
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
KillWait=5
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=ompc Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
fi

# munge: its directories belong to the munge user, and it needs a key.
mkdir -p /run/munge /var/log/munge /var/lib/munge /etc/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
chmod 0755 /run/munge
[ -f /etc/munge/munge.key ] || { runuser -u munge -- /usr/sbin/mungekey --create >/dev/null 2>&1 || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none; }
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
if ! pgrep -x munged >/dev/null; then
  runuser -u munge -- /usr/sbin/munged
fi

if ours; then
  stop
  slurmctld
  slurmd
else
  # Someone else's Slurm: started only if it is not running.
  pgrep -x slurmctld >/dev/null || slurmctld
  pgrep -x slurmd >/dev/null || slurmd
fi
for _ in $(seq 100); do
  state=$(sinfo -h -o %t 2>/dev/null | head -1 || true)
  case "$state" in idle|mix|alloc) echo "slurm-sim: node $(hostname -s) is $state"; exit 0 ;; esac
  # A node that came back after a restart may be down: resume it.
  case "$state" in down*|drain*) scontrol update nodename="$(hostname -s)" state=resume 2>/dev/null || true ;; esac
  sleep 0.2
done
echo "slurm-sim: the node did not become idle (sinfo: $(sinfo 2>&1 | tail -1)); see /var/log/slurm/" >&2
exit 1
