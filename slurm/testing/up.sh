#!/usr/bin/env bash
# Bring up the Slurm test cluster used by CI: munge, MariaDB + slurmdbd (for sacct), slurmctld, and
# three slurmd:
#   - "localhost" (partitions debug and high), advertising 8 CPUs and 8 fake GPUs (GRES);
#   - "ci-node1" and "ci-node2" (partition multi), 4 CPUs and 2 fake GPUs each, each slurmd in its
#     own network and UTS namespace (hostname = node name) with its own address on a bridge this
#     script creates (lib.sh: CI_BRIDGE, CI_NODES), so multi-node jobs (srun over 2 nodes, ranks
#     meeting at the first node's address) run as on a real cluster. Files are shared (no mount
#     namespace), like a cluster's shared file system.
#
# Needs root on Debian 12 (bookworm); starts daemons by hand (no systemd), each writing a pid file
# that down.sh uses. Idempotent and cheap when already up: packages already installed are not
# reinstalled, a daemon whose pid file names a live process is left alone, and when every node
# already answers as idle the script returns at once. Config files are this directory's *.conf.
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

nodes=(localhost)
for entry in "${CI_NODES[@]}"; do nodes+=("${entry%%:*}"); done
node_state() { sinfo -h -n "$1" -o %t 2>/dev/null | head -1 || true; }
all_usable() {  # every node idle (or running jobs)
  local n
  for n in "${nodes[@]}"; do
    case "$(node_state "$n")" in idle|mix|alloc) ;; *) return 1 ;; esac
  done
}
all_slurmd_alive() {
  local n
  for n in "${nodes[@]}"; do alive "/run/slurmd-$n.pid" || return 1; done
}

if [ "$(id -u)" != 0 ]; then
  echo "up.sh: must run as root (it installs packages and starts system daemons)" >&2
  exit 1
fi

# Already up and configured the same? Then there is nothing to do.
if command -v sinfo >/dev/null && alive /run/slurmctld.pid && all_slurmd_alive \
   && cmp -s "$here/slurm.conf" /etc/slurm/slurm.conf && cmp -s "$here/gres.conf" /etc/slurm/gres.conf \
   && all_usable; then
  log "already up"; sinfo; exit 0
fi

# --- packages (only the missing ones); iproute2 and util-linux (nsenter, unshare) for the nodes ---
installed="$(apt_install_missing slurmctld slurmd slurm-client slurmdbd munge mariadb-server iproute2 util-linux)"
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

# --- the multi partition's network: bridge, namespaces, veth pairs, /etc/hosts ---
ci_network_up

# --- config files ---
changed=0
for f in slurm.conf gres.conf slurmdbd.conf; do
  cmp -s "$here/$f" "/etc/slurm/$f" || { install -m 0644 "$here/$f" "/etc/slurm/$f"; changed=1; }
done
chown slurm:slurm /etc/slurm/slurmdbd.conf && chmod 0600 /etc/slurm/slurmdbd.conf
install -d -o slurm -g slurm /var/lib/slurm/slurmctld /var/log/slurm
for n in "${nodes[@]}"; do install -d "/var/lib/slurm/slurmd-$n"; done
if [ "$changed" = 1 ]; then  # daemons started with other configs must be restarted
  # (/run/slurmd.pid: the slurmd of the former single-node configuration)
  for f in /run/slurmd.pid /run/slurmd-*.pid /run/slurmctld.pid; do
    if alive "$f"; then
      pid=$(cat "$f"); kill "$pid"
      for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    fi
  done
  rm -f /run/slurmd.pid
fi

# --- daemons (each forks into the background and writes its pid file) ---
alive /run/slurmdbd.pid || slurmdbd
for _ in $(seq 120); do sacctmgr -n show cluster >/dev/null 2>&1 && break; sleep 0.5; done
alive /run/slurmctld.pid || slurmctld      # registers ClusterName in slurmdbd by itself
alive /run/slurmd-localhost.pid || slurmd -N localhost
for entry in "${CI_NODES[@]}"; do
  alive "/run/slurmd-${entry%%:*}.pid" || ci_slurmd "${entry%%:*}"
done
for _ in $(seq 120); do
  all_usable && break
  for n in "${nodes[@]}"; do
    case "$(node_state "$n")" in
      drain*|drng) scontrol update nodename="$n" state=resume >/dev/null 2>&1 || true ;;
    esac
  done
  sleep 0.5
done
sinfo
if all_usable; then
  log "cluster up (nodes ${nodes[*]}): $((SECONDS-t0))s"
else
  sinfo -N -l >&2 || true
  echo "up.sh: a node is not usable; see /var/log/slurm/slurmctld.log and slurmd-<node>.log" >&2
  exit 1
fi
