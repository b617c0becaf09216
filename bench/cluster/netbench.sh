#!/usr/bin/env bash
# The cluster runtime on an emulated network: N network namespaces joined by
# veth pairs to a bridge, every link shaped by `tc … tbf` in both directions
# (netem is not available on these kernels), one `tra worker` agent per
# namespace, and `tra run --hosts` from the root namespace.
#
# Runs the three matmul shapes (two general matrices; a common large
# dimension; two large dimensions) with BMM, CMM and RMM forced in turn and
# as chosen by the optimizer, and compares the measured times with the cost
# model's ranking (see netbench.py).
#
# With --every-alternative it instead measures the shaped cluster with
# `tra calibrate --hosts` and runs every alternative plan of the suite of
# bench/run_every_alternative.py there under both cost models (predicted vs
# measured seconds, regret, Kendall tau); the profile is written beside --out.
#
# Needs root, and `ip`/`tc` from iproute2 (installed with apt-get if missing).
#
#   sudo bench/cluster/netbench.sh [--rate 100mbit] [--processes 3] [--reps 5]
#                                  [--block 256] [--tra PATH] [--out FILE.json]
#                                  [--every-alternative] [--only TEXT] [--baseline-tra PATH]
#                                  [--baseline-without FIELD] [--head-to-head N]
#
# --head-to-head N (with --every-alternative) runs only the plan each cost
# model chooses, N times each, and compares them (run_every_alternative.py's
# --head-to-head).
#
# --baseline-without FIELD (with --every-alternative) also ranks every
# alternative with the calibrated profile less FIELD (rows `time-baseline`,
# the same binary unless --baseline-tra says otherwise): what one profile
# field changes, on the same measurements.
set -euo pipefail
cd "$(dirname "$0")/../.."

RATE=100mbit
N=3
REPS=5
BLOCK=256
TRA=""
OUT=bench/cluster/netbench-results.json
EVERY=0
ONLY=""
BASELINE=""
WITHOUT=""
H2H=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) RATE="$2"; shift 2 ;;
    --processes) N="$2"; shift 2 ;;
    --reps) REPS="$2"; shift 2 ;;
    --block) BLOCK="$2"; shift 2 ;;
    --tra) TRA="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --every-alternative) EVERY=1; shift ;;
    --only) ONLY="$2"; shift 2 ;;
    --baseline-tra) BASELINE="$2"; shift 2 ;;
    --baseline-without) WITHOUT="$2"; shift 2 ;;
    --head-to-head) H2H="$2"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

if [ "$(id -u)" -ne 0 ]; then
  echo "netbench: needs root (network namespaces, tc)" >&2
  exit 1
fi
if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
  echo "netbench: installing iproute2" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q iproute2
fi
python3 -c "import numpy" 2>/dev/null || python3 -m pip install -q numpy
if [ -z "$TRA" ]; then
  cargo build --release -q -p tra-api --bin tra
  TRA="$PWD/target/release/tra"
fi
TRA="$(realpath "$TRA")"

WORK="$(mktemp -d /tmp/tra-netbench.XXXXXX)"
BR=trabr0
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
  for i in $(seq 0 $((N - 1))); do
    ip netns del "tra-ns$i" 2>/dev/null || true
    ip link del "tra-v$i" 2>/dev/null || true
  done
  ip link del "$BR" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# The network: a bridge in the root namespace, one namespace per process.
ip link add "$BR" type bridge
ip addr add 10.77.0.254/24 dev "$BR"
ip link set "$BR" up
: > "$WORK/hosts.txt"
for i in $(seq 0 $((N - 1))); do
  ns="tra-ns$i"
  ip netns add "$ns"
  ip link add "tra-v$i" type veth peer name eth0 netns "$ns"
  ip link set "tra-v$i" master "$BR" up
  ip -n "$ns" addr add "10.77.0.$((i + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  # Shape both directions of the link: what the process sends (eth0 in its
  # namespace) and what it receives (its veth end on the bridge).
  tc qdisc add dev "tra-v$i" root tbf rate "$RATE" burst 256kb latency 200ms
  ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$RATE" burst 256kb latency 200ms
  echo "10.77.0.$((i + 1)):2101" >> "$WORK/hosts.txt"
done

# One worker per namespace, sharing a fresh cluster secret (found beside the
# host file) and confined to the work directory.
"$TRA" secret "$WORK/secret" >/dev/null
for i in $(seq 0 $((N - 1))); do
  ip netns exec "tra-ns$i" "$TRA" worker --process "$i" --hosts "$WORK/hosts.txt" --data-dir "$WORK" 2> "$WORK/worker-$i.log" &
  PIDS+=($!)
done
sleep 1

if [ "$EVERY" = 1 ]; then
  PROFILE="${OUT%.json}-profile.json"
  "$TRA" calibrate --hosts "$WORK/hosts.txt" --dir "$WORK" --block "$BLOCK" --verbose > "$PROFILE"
  cat "$PROFILE"
  BASELINE_PROFILE=""
  if [ -n "$WITHOUT" ]; then
    BASELINE_PROFILE="${OUT%.json}-profile-without-$WITHOUT.json"
    python3 -c 'import json, sys; p = json.load(open(sys.argv[1])); p.pop(sys.argv[2], None); json.dump(p, open(sys.argv[3], "w"), indent=2)' \
      "$PROFILE" "$WITHOUT" "$BASELINE_PROFILE"
    BASELINE="${BASELINE:-$TRA}"
  fi
  python3 bench/run_every_alternative.py --tra "$TRA" --hosts "$WORK/hosts.txt" --work "$WORK" \
    --profile "$PROFILE" --reps "$REPS" --block "$BLOCK" --json "$OUT" ${ONLY:+--only "$ONLY"} \
    ${BASELINE:+--baseline-tra "$BASELINE"} ${BASELINE_PROFILE:+--baseline-profile "$BASELINE_PROFILE"} \
    ${H2H:+--head-to-head "$H2H"}
  exit 0
fi

python3 bench/cluster/netbench.py --tra "$TRA" --hosts "$WORK/hosts.txt" --work "$WORK" \
  --rate "$RATE" --reps "$REPS" --block "$BLOCK" --out "$OUT"
