#!/usr/bin/env bash
# Bring up the single-node Slurm test cluster used by CI: munge, MariaDB + slurmdbd (for sacct),
# slurmctld and slurmd on "localhost", advertising 8 CPUs and 8 fake GPUs (GRES).
#
# Needs root on Debian 12 (bookworm); starts daemons by hand (no systemd), each writing a pid file
# that down.sh uses. Idempotent and cheap when already up: packages already installed are not
# reinstalled, a daemon whose pid file names a live process is left alone, and when the node already
# answers as idle the script returns at once. Config files are this directory's *.conf.
#
# Usage: slurm/testing/up.sh            (prints sinfo and the time it took)
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/lib.sh"
t0=$SECONDS
log() { echo "[slurm-testing] $*"; }

alive() {  # alive PIDFILE: the pid file exists and names a running process
  [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

node_state() { sinfo -h -n localhost -o %t 2>/dev/null | head -1 || true; }

if [ "$(id -u)" != 0 ]; then
  echo "up.sh: must run as root (it installs packages and starts system daemons)" >&2
  exit 1
fi

# Already up and configured the same? Then there is nothing to do.
if command -v sinfo >/dev/null && alive /run/slurmctld.pid && alive /run/slurmd.pid \
   && cmp -s "$here/slurm.conf" /etc/slurm/slurm.conf && [ "$(node_state)" = idle ]; then
  log "already up"; sinfo; exit 0
fi

# --- packages (only the missing ones) ---
installed="$(apt_install_missing slurmctld slurmd slurm-client slurmdbd munge mariadb-server)"
[ -z "$installed" ] || log "installed $installed: $((SECONDS-t0))s"

# --- munge ---
[ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
install -d -o munge -g munge -m 0755 /run/munge
alive /run/munge/munged.pid || runuser -u munge -- /usr/sbin/munged
munge -n | unmunge >/dev/null

# --- MariaDB for slurmdbd (sacct is how submitit notices jobs that died without a result) ---
install -d -o mysql -g mysql -m 0755 /run/mysqld
if ! alive /run/mysqld/mysqld.pid; then
  setsid /usr/sbin/mariadbd --user=mysql --bind-address=127.0.0.1 \
      --pid-file=/run/mysqld/mysqld.pid </dev/null >/var/log/mariadb-slurm-testing.log 2>&1 &
fi
for _ in $(seq 120); do mariadb-admin ping >/dev/null 2>&1 && break; sleep 0.5; done
mariadb -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmdbpass';
            GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"

# --- fake GPUs: GRES needs character devices; clones of /dev/null (major 1, minor 3) ---
install -d /var/lib/slurm/fakegpu
for i in 0 1 2 3 4 5 6 7; do
  [ -e /var/lib/slurm/fakegpu/nvidia$i ] || mknod -m 0666 /var/lib/slurm/fakegpu/nvidia$i c 1 3
done

# --- config files ---
changed=0
for f in slurm.conf gres.conf slurmdbd.conf; do
  cmp -s "$here/$f" "/etc/slurm/$f" || { install -m 0644 "$here/$f" "/etc/slurm/$f"; changed=1; }
done
chown slurm:slurm /etc/slurm/slurmdbd.conf && chmod 0600 /etc/slurm/slurmdbd.conf
install -d -o slurm -g slurm /var/lib/slurm/slurmctld /var/log/slurm
install -d /var/lib/slurm/slurmd
if [ "$changed" = 1 ]; then  # daemons started with other configs must be restarted
  for f in /run/slurmd.pid /run/slurmctld.pid; do
    if alive "$f"; then
      pid=$(cat "$f"); kill "$pid"
      for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    fi
  done
fi

# --- daemons (each forks into the background and writes its pid file) ---
alive /run/slurmdbd.pid || slurmdbd
for _ in $(seq 120); do sacctmgr -n show cluster >/dev/null 2>&1 && break; sleep 0.5; done
alive /run/slurmctld.pid || slurmctld      # registers ClusterName in slurmdbd by itself
alive /run/slurmd.pid || slurmd -N localhost
for _ in $(seq 120); do
  case "$(node_state)" in
    idle|mix|alloc) break ;;
    drain*|drng) scontrol update nodename=localhost state=resume >/dev/null 2>&1 || true ;;
  esac
  sleep 0.5
done
state="$(node_state)"
sinfo
case "$state" in
  idle|mix|alloc) log "cluster up (node $state): $((SECONDS-t0))s" ;;
  *) echo "up.sh: node not usable (state '$state'); see /var/log/slurm/slurmctld.log and slurmd.log" >&2; exit 1 ;;
esac
