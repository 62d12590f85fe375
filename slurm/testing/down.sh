#!/usr/bin/env bash
# Stop the test cluster started by up.sh, by pid file only (never by process name), and remove the
# nodes' network (bridge, namespaces, /etc/hosts lines). Safe to run when it is already down.
# Pending and running jobs are cancelled first so no job outlives it.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/lib.sh"
if [ -s /run/slurmctld.pid ] && kill -0 "$(cat /run/slurmctld.pid)" 2>/dev/null; then
  scancel --user=root >/dev/null 2>&1 || true
fi
# /run/slurmd.pid: the slurmd of the former single-node configuration
for f in /run/slurmd-*.pid /run/slurmd.pid /run/slurmctld.pid /run/slurmdbd.pid /run/mysqld/mysqld.pid \
         /run/munge/munged.pid; do
  if [ -s "$f" ]; then
    pid=$(cat "$f")
    if kill "$pid" 2>/dev/null; then
      for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    fi
  fi
done
# slurm daemons leave their pid files behind; a stale /run/slurmctld.pid also breaks a later
# `apt-get purge slurmctld` (its prerm runs scancel when the file exists).
rm -f /run/slurmctld.pid /run/slurmd-*.pid /run/slurmd.pid /run/slurmdbd.pid
ci_network_down
echo "[slurm-testing] down"
