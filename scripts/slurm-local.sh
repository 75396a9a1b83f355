#!/usr/bin/env bash
# A single-node Slurm cluster on this machine, to try fedpq's Slurm scripts
# (deploy/slurm/) before a real cluster: munged, slurmctld and slurmd from
# Debian's munge and slurm-wlm, run as root, with their configuration, state,
# logs and pid files in one directory ($FEDPQ_SLURM_DIR, default
# /var/tmp/fedpq-slurm) and the node's CPUs shared by up to 8 jobs each
# (OverSubscribe=FORCE:8), so that a server job and its clients' array fit on
# a small machine.
#   scripts/slurm-local.sh start     start it (idempotent); prints the SLURM_CONF to export
#   scripts/slurm-local.sh status    what runs, and sinfo
#   scripts/slurm-local.sh stop      stop the daemons it started (by their pid files)
# sbatch, squeue and the other commands need SLURM_CONF=$FEDPQ_SLURM_DIR/slurm.conf.
set -euo pipefail
dir=${FEDPQ_SLURM_DIR:-/var/tmp/fedpq-slurm}
export SLURM_CONF=$dir/slurm.conf
munge_pid=/run/munge/munged.pid

running() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

start_munge() {
  running "$munge_pid" && return
  local key=/etc/munge/munge.key
  if [ ! -s "$key" ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom of="$key" bs=1 count=128 status=none
  fi
  chown munge:munge /etc/munge "$key"; chmod 700 /etc/munge; chmod 400 "$key"
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  chown munge:munge /run/munge /var/lib/munge /var/log/munge
  runuser -u munge -- /usr/sbin/munged
}

write_conf() {
  local host cpus
  host=$(hostname -s)
  cpus=$(nproc)
  mkdir -p "$dir/state" "$dir/spool" "$dir/log"
  cat > "$SLURM_CONF" <<CONF
# Written by fedpq's scripts/slurm-local.sh: one node, this machine.
ClusterName=fedpq-local
SlurmctldHost=$host
SlurmUser=root
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
CONF
}

start() {
  for c in munged slurmctld slurmd sinfo; do
    command -v "$c" >/dev/null || [ -x "/usr/sbin/$c" ] || { echo "slurm-local.sh: $c is missing (apt-get install slurm-wlm munge)" >&2; exit 1; }
  done
  [ "$(id -u)" = 0 ] || { echo "slurm-local.sh: run it as root (the daemons run as root and munge)" >&2; exit 1; }
  start_munge
  if ! running "$dir/slurmctld.pid"; then
    write_conf
    /usr/sbin/slurmctld
  fi
  running "$dir/slurmd.pid" || /usr/sbin/slurmd
  for _ in $(seq 60); do
    if sinfo -h -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then
      echo "slurm-local: up; export SLURM_CONF=$SLURM_CONF"
      return
    fi
    sleep 1
  done
  echo "slurm-local.sh: the node did not come up; logs in $dir/log" >&2
  sinfo -R >&2 || true
  exit 1
}

stop() {
  local f
  for f in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$munge_pid"; do
    if running "$f"; then
      kill "$(cat "$f")"
      for _ in $(seq 20); do running "$f" || break; sleep 0.5; done
    fi
  done
  echo "slurm-local: stopped"
}

status() {
  local f
  for f in "$munge_pid" "$dir/slurmctld.pid" "$dir/slurmd.pid"; do
    if running "$f"; then echo "$(basename "$f" .pid): running (pid $(cat "$f"))"; else echo "$(basename "$f" .pid): not running"; fi
  done
  running "$dir/slurmctld.pid" && sinfo
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
