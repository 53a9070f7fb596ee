#!/usr/bin/env bash
# Slow links for experiments: a network namespace joined to this host by a
# veth pair on a /30 of its own, its link shaped both ways with tc netem
# (delay, jitter, loss, a rate limit), and commands run inside it -- so that
# daemons in different namespaces talk over links like a real cluster's.
# The same layout as the tests' helpers (tests/netns.h). Needs root and
# iproute2; pstrain's daemons need --listen on the namespace's address.
#
#   deploy/netem.sh up N [--delay=MS] [--jitter=MS] [--loss=PCT] [--rate=MBIT]
#       makes namespace pstrain-netem-N (N in 0..99): host 10.213.N.1,
#       namespace 10.213.N.2; with host forwarding on, namespaces reach
#       each other through the host (deploy/netem.sh forward on)
#   deploy/netem.sh exec N -- COMMAND...   runs COMMAND inside it
#   deploy/netem.sh down N                 removes it
#   deploy/netem.sh forward on|off         the host's IPv4 forwarding
#
# Bad values (a negative delay or jitter, a loss outside 0..100 %, a rate
# <= 0, an unknown option) exit 2 with the reason, before anything changes;
# `up` of a namespace that exists already (another run's) exits 3; a kernel
# without sch_netem asked for a delay, jitter or loss exits 1.
set -euo pipefail
# ip and tc live in /sbin on Debian 12, which a non-login PATH (Bazel's
# tests, cron, sudo -E) may not name.
PATH="$PATH:/usr/sbin:/sbin"

usage() {
  sed -n '9,16p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
die() { echo "netem.sh: $*" >&2; exit 2; }

# A non-negative decimal number, or exit 2 naming the option.
number() {
  local name="$1" value="$2"
  [[ "$value" =~ ^[0-9]+([.][0-9]+)?$ ]] ||
    die "--$name=$value: must be a number >= 0"
}

index() {
  [[ "${1:-}" =~ ^[0-9]+$ ]] && [ "$1" -le 99 ] || die "namespace index '${1:-}': must be 0..99"
}

cmd="${1:-}"
[ -n "$cmd" ] || usage
shift

case "$cmd" in
  up)
    index "${1:-}"; n="$1"; shift
    delay=0 jitter=0 loss=0 rate=""
    for arg in "$@"; do
      case "$arg" in
        --delay=*) delay="${arg#*=}"; number delay "$delay" ;;
        --jitter=*) jitter="${arg#*=}"; number jitter "$jitter" ;;
        --loss=*) loss="${arg#*=}"; number loss "$loss"
          awk -v l="$loss" 'BEGIN { exit !(l <= 100) }' || die "--loss=$loss: must be 0..100 (%)" ;;
        --rate=*) rate="${arg#*=}"; number rate "$rate"
          awk -v r="$rate" 'BEGIN { exit !(r > 0) }' || die "--rate=$rate: must be > 0 (Mbit/s)" ;;
        *) die "unknown option '$arg' (--delay, --jitter, --loss, --rate)" ;;
      esac
    done
    [ "$(id -u)" -eq 0 ] || die "needs root (ip netns, tc)"
    command -v ip >/dev/null && command -v tc >/dev/null || die "needs iproute2 (ip, tc)"
    ns="pstrain-netem-$n" host_if="pnetem$n" ns_if="pnetem${n}n"
    if ! ip netns add "$ns" 2>/dev/null; then
      echo "netem.sh: $ns exists already (in use by another run?)" >&2
      exit 3
    fi
    if ! ip link add "$host_if" type veth peer name "$ns_if"; then
      ip netns del "$ns" 2>/dev/null || true
      exit 1
    fi
    ip link set "$ns_if" netns "$ns"
    ip addr add "10.213.$n.1/30" dev "$host_if"
    ip link set "$host_if" up
    ip netns exec "$ns" ip addr add "10.213.$n.2/30" dev "$ns_if"
    ip netns exec "$ns" ip link set "$ns_if" up
    ip netns exec "$ns" ip link set lo up
    ip netns exec "$ns" ip route add default via "10.213.$n.1"
    netem=(netem delay "${delay}ms")
    if [ "$jitter" != 0 ]; then netem+=("${jitter}ms"); fi
    netem+=(loss "${loss}%")
    if [ -n "$rate" ]; then netem+=(rate "${rate}mbit"); fi
    qdisc=("${netem[@]}")
    if ! tc qdisc replace dev "$host_if" root "${qdisc[@]}" 2>/dev/null; then
      # No sch_netem in this kernel: a rate alone can still be had (tbf).
      if [ "$delay$jitter$loss" = "000" ] && [ -n "$rate" ]; then
        qdisc=(tbf rate "${rate}mbit" burst 256kb latency 200ms)
        tc qdisc replace dev "$host_if" root "${qdisc[@]}"
      else
        ip link del "$host_if" 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
        echo "netem.sh: this kernel has no netem (module sch_netem): delay, jitter and" \
             "loss cannot be emulated here; --rate alone works (tbf)" >&2
        exit 1
      fi
    fi
    ip netns exec "$ns" tc qdisc replace dev "$ns_if" root "${qdisc[@]}"
    echo "netem.sh: $ns at 10.213.$n.2 (host 10.213.$n.1): ${qdisc[*]} each way"
    ;;
  exec)
    index "${1:-}"; n="$1"; shift
    [ "${1:-}" = "--" ] && shift
    [ $# -gt 0 ] || die "exec N -- COMMAND..."
    exec ip netns exec "pstrain-netem-$n" "$@"
    ;;
  down)
    index "${1:-}"; n="$1"
    ip link del "pnetem$n" 2>/dev/null || true
    ip netns del "pstrain-netem-$n" 2>/dev/null || true
    ;;
  forward)
    case "${1:-}" in
      on) echo 1 > /proc/sys/net/ipv4/ip_forward ;;
      off) echo 0 > /proc/sys/net/ipv4/ip_forward ;;
      *) die "forward on|off" ;;
    esac
    ;;
  *) usage ;;
esac
