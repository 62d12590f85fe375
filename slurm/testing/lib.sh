# Shared by up.sh and image.sh (sourced, not run).

# apt_install_missing PKG...: install those of the Debian packages that are not installed yet and
# print their names (nothing when all were there). Each step is checked explicitly because callers
# capture the output with $(...), where `set -e` does not apply.
apt_install_missing() {
  local need=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
  done
  [ ${#need[@]} -gt 0 ] || return 0
  apt-get update -qq >&2 || return 1
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null || return 1
  echo "${need[*]}"
}

# The nodes of the `multi` partition: NAME:ADDRESS on the bridge (keep equal to slurm.conf). Each
# is a slurmd in its own network and UTS namespace (`ip netns` NAME, hostname NAME), joined to the
# bridge CI_BRIDGE by a veth pair; the host side of the bridge (CI_BRIDGE_ADDR) is where the nodes
# reach slurmctld. Only the network and the hostname are separate: files, processes and the munge
# socket are shared with the host, as on a cluster with a shared file system.
CI_BRIDGE=slurmci0
CI_BRIDGE_ADDR=172.31.254.1
CI_PREFIX=24
CI_NODES=(ci-node1:172.31.254.11 ci-node2:172.31.254.12)
CI_HOSTS_TAG="# slurm/testing node"

# ci_network_up: create (or complete) the bridge, the namespaces, the veth pairs and the
# /etc/hosts lines of CI_NODES. Idempotent.
ci_network_up() {
  local entry name addr veth
  ip link show "$CI_BRIDGE" >/dev/null 2>&1 || ip link add "$CI_BRIDGE" type bridge
  ip -4 addr show dev "$CI_BRIDGE" | grep -q "inet $CI_BRIDGE_ADDR/" \
    || ip addr add "$CI_BRIDGE_ADDR/$CI_PREFIX" dev "$CI_BRIDGE"
  ip link set "$CI_BRIDGE" up
  for entry in "${CI_NODES[@]}"; do
    name=${entry%%:*} addr=${entry#*:} veth="veth-${entry%%:*}"
    [ -e "/run/netns/$name" ] || ip netns add "$name"
    ip -n "$name" link show eth0 >/dev/null 2>&1 || {
      ip link del "$veth" 2>/dev/null || true
      ip link add "$veth" type veth peer name eth0 netns "$name"
    }
    ip link set "$veth" master "$CI_BRIDGE"
    ip link set "$veth" up
    ip -n "$name" link set lo up
    ip -n "$name" -4 addr show dev eth0 | grep -q "inet $addr/" || ip -n "$name" addr add "$addr/$CI_PREFIX" dev eth0
    ip -n "$name" link set eth0 up
    # names resolve the same in every namespace (MASTER_ADDR, gloo's own address): /etc/hosts
    grep -qE "^$addr[[:space:]]+$name([[:space:]]|\$)" /etc/hosts || echo "$addr $name $CI_HOSTS_TAG" >>/etc/hosts
  done
  for entry in "${CI_NODES[@]}"; do  # what the node's slurmd will see
    name=${entry%%:*} addr=${entry#*:}
    nsenter --net="/run/netns/$name" ip -4 -br addr show dev eth0 2>/dev/null | grep -q "$addr/" || {
      echo "ci_network_up: namespace $name has no eth0 with $addr" >&2; return 1; }
  done
}

# ci_network_down: remove what ci_network_up made (the /etc/hosts file is rewritten in place, not
# replaced: it may be a bind mount).
ci_network_down() {
  local entry name kept
  for entry in "${CI_NODES[@]}"; do
    name=${entry%%:*}
    ip link del "veth-$name" 2>/dev/null || true
    [ -e "/run/netns/$name" ] && ip netns del "$name" 2>/dev/null || true
  done
  ip link del "$CI_BRIDGE" 2>/dev/null || true
  if grep -q "$CI_HOSTS_TAG" /etc/hosts 2>/dev/null; then
    kept=$(grep -v "$CI_HOSTS_TAG" /etc/hosts)
    printf '%s\n' "$kept" >/etc/hosts
  fi
}

# ci_slurmd NAME: start the slurmd of node NAME inside its namespaces (network: `ip netns` NAME;
# UTS: a new one whose hostname is NAME). slurmd forks into the background and stays in both.
ci_slurmd() {
  nsenter --net="/run/netns/$1" unshare --uts sh -c 'hostname "$1" && exec slurmd -N "$1"' sh "$1"
}
