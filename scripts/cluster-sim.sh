#!/usr/bin/env bash
# Several "nodes" on one machine, for multi-node tests and trials (root only): each node is a
# Linux network namespace (`ompc-nodeK`) with its own address on a bridge (`ompcbr0`,
# 10.77.0.0/24; the machine itself is 10.77.0.1), and every command started on it runs in a
# UTS namespace of its own whose hostname is `nodeK`, so that ranks on different nodes see
# different hosts (the runtime cannot see their processes through /proc: only the heartbeat
# tells it that one died). Open MPI starts its daemons on the nodes through the rsh agent this
# script writes (`<dir>/rsh`), which runs the command inside the node's namespaces instead of
# over ssh. A directory `<dir>/shared` is bind-mounted at the same path on every node, standing
# for a shared file system (checkpoints).
#
#   bash scripts/cluster-sim.sh up N [DIR]   create N nodes; prints the settings to use
#   bash scripts/cluster-sim.sh down [DIR]   remove them (and kill what still runs on them)
#   bash scripts/cluster-sim.sh env [DIR]    print the settings again
#
# `up` and `env` print the settings (`eval "$(bash scripts/cluster-sim.sh env)"`):
# CLUSTER_HOSTFILE for `ompcluster-run --hostfile`, and CLUSTER_MPIRUN_ARGS, the mpirun
# arguments to pass one by one with `--mpirun-arg`:
#   target/release/ompcluster-run -np 4 --hostfile "$CLUSTER_HOSTFILE" \
#     $(for a in $CLUSTER_MPIRUN_ARGS; do printf -- '--mpirun-arg=%s ' "$a"; done) ./app
set -euo pipefail

cmd=${1:-}
if [ "$cmd" = up ]; then dir=${3:-}; else dir=${2:-}; fi
dir=${dir:-${TMPDIR:-/tmp}/ompc-cluster-$(id -u)}
BR=ompcbr0
NET=10.77.0

need_root() {
  [ "$(id -u)" -eq 0 ] || { echo "cluster-sim: needs root (network namespaces)" >&2; exit 1; }
  command -v ip >/dev/null || { echo "cluster-sim: needs ip (apt-get install iproute2)" >&2; exit 1; }
}

print_env() {
  [ -f "$dir/hostfile" ] || { echo "cluster-sim: no simulated cluster in $dir (run: $0 up N)" >&2; exit 1; }
  echo "CLUSTER_DIR=$dir"
  echo "CLUSTER_HOSTFILE=$dir/hostfile"
  echo "CLUSTER_SHARED=$dir/shared"
  echo "CLUSTER_MPIRUN_ARGS='--mca plm_rsh_agent $dir/rsh --mca btl_tcp_if_include $NET.0/24 --mca oob_tcp_if_include $NET.0/24'"
}

down() {
  need_root
  for ns in $(ip netns list 2>/dev/null | awk '/^ompc-node[0-9]+/ {print $1}'); do
    # What still runs in the node (a frozen rank, say) dies with it.
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  ip link del "$BR" 2>/dev/null || true
  if [ -d "$dir" ] && [ -f "$dir/hostfile" ]; then
    umount -R "$dir/shared" 2>/dev/null || true
    rm -rf "$dir"
  fi
}

up() {
  local n=$1
  need_root
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 200 ] || { echo "cluster-sim: N must be 1..200" >&2; exit 2; }
  down
  mkdir -p -m 0700 "$dir" "$dir/shared"
  ip link add "$BR" type bridge
  ip addr add "$NET.1/24" dev "$BR"
  ip link set "$BR" up
  : > "$dir/hostfile"
  : > "$dir/nodes"
  for k in $(seq 1 "$n"); do
    local ns=ompc-node$k addr=$NET.$((10 + k))
    ip netns add "$ns"
    ip link add "vompc$k" type veth peer name eth0 netns "$ns"
    ip link set "vompc$k" master "$BR" up
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    echo "$addr slots=1" >> "$dir/hostfile"
    echo "$addr $ns node$k" >> "$dir/nodes"
  done
  # The rsh agent: `rsh [options] HOST COMMAND...` as Open MPI calls ssh; the command runs in
  # the node's network namespace, in a UTS namespace named after the node and a mount
  # namespace where the shared directory is bind-mounted (the same path: a shared file system).
  cat > "$dir/rsh" <<EOF
#!/usr/bin/env bash
set -eu
while [ \$# -gt 0 ] && [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1; shift
line=\$(awk -v h="\$host" '\$1 == h || \$2 == h || \$3 == h' "$dir/nodes")
[ -n "\$line" ] || { echo "cluster-sim rsh: no node \$host" >&2; exit 255; }
set -- "\$(echo "\$line" | cut -d' ' -f2)" "\$(echo "\$line" | cut -d' ' -f3)" "\$*"
exec ip netns exec "\$1" unshare --uts --mount --propagation private sh -c 'hostname "\$0" && mount --bind "$dir/shared" "$dir/shared" && exec sh -c "\$1"' "\$2" "\$3"
EOF
  chmod 0700 "$dir/rsh"
  print_env
}

case "$cmd" in
  up) up "${2:?usage: $0 up N [DIR]}" ;;
  down) down ;;
  env) print_env ;;
  *) echo "usage: $0 up N [DIR] | down [DIR] | env [DIR]" >&2; exit 2 ;;
esac
