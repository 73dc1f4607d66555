#!/usr/bin/env bash
# Runs smpi_bench.so (experiments/smpi/smpi_bench.cc: the ring all-reduce, MPI_Allreduce and a
# stand-in of the parameter server's message pattern, `--backends ps`, built with SimGrid's
# smpicxx) under `smpirun` on a simulated cluster, once per process count:
#
#   scripts/smpi_bench.sh [--bin build/smpi/smpi_bench.so] [--np 4,8,16] [--bandwidth-gbps 25]
#       [--latency-us 5] [--coll-selector ompi] [--smpi-test-s 1e-7] [--compute]
#       [--smpi-cfg KEY:VALUE]... [--json-out FILE]
#       [-- `starring bench` options: -b 1M -e 64M -f 2 -n 1 -w 0 --backends ring-p2p,mpi ...]
# (`--help` after `--` is taken by SimGrid itself: see `starring bench --help` for the options.)
#
# The platform: N hosts, each with a private full-duplex link of --bandwidth-gbps to one switch
# (SimGrid's <cluster>, flat/star topology, no backbone limit), so a message crosses two links:
# each gets half of --latency-us, which is the host-to-host latency (the cost model's alpha).
# The network model is CM02 (plain max-min sharing, no latency or bandwidth correction factors,
# no TCP-ACK cross traffic): the network an alpha-beta model describes. The simulation's knobs:
#   --coll-selector   which MPI_Allreduce algorithm SMPI runs: "ompi" (SMPI's copy of Open MPI's
#                     decision rules; Open MPI is this project's MPI), "mpich", "default"...
#   --smpi-test-s     simulated time an MPI_Test that finds nothing costs (smpi/test, not grown):
#                     the ring polls, so this is its polling granularity. Measured at np 64,
#                     1 MiB (16 KiB per step), against SMPI's blocking ring (smpi/allreduce:lr,
#                     1291 us): 1e-6 s -> 1512 us, 1e-7 (default) -> 1310 us, 1e-8 -> 1293 us
#                     but 5x slower to simulate;
#   --smpi-cfg K:V    any other SimGrid option (e.g. smpi/allreduce:lr picks one algorithm);
#   --compute         also charge the computation between MPI calls (the ring's reductions),
#                     measured on this machine's CPU, to the simulated hosts (as fast as this
#                     core); default off: only the network is simulated, reductions are free.
# Rows go to stdout as `starring bench` prints them; --json-out FILE appends the JSON rows with
# the platform added ("platform": {...}) for scripts/smpi_compare.py. Exit 77 when SimGrid is
# not installed (so CTest reports a skip).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/build/smpi/smpi_bench.so"
nps=4 bw=25 lat=5 selector=ompi test_s=1e-7 compute=0 json_out="" extra_cfg=()
while [ $# -gt 0 ]; do
  case "$1" in  # an option that takes a value must have one: not bash's "$2: unbound variable"
    --bin | --np | --bandwidth-gbps | --latency-us | --coll-selector | --smpi-test-s | \
      --smpi-cfg | --json-out)
      [ $# -ge 2 ] || { echo "smpi_bench.sh: $1 needs a value (see --help)" >&2; exit 2; } ;;&
    --bin) bin=$2; shift 2 ;;
    --np) nps=$2; shift 2 ;;
    --bandwidth-gbps) bw=$2; shift 2 ;;
    --latency-us) lat=$2; shift 2 ;;
    --coll-selector) selector=$2; shift 2 ;;
    --smpi-test-s) test_s=$2; shift 2 ;;
    --compute) compute=1; shift ;;
    --smpi-cfg) extra_cfg+=("--cfg=$2"); shift 2 ;;
    --json-out) json_out=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "smpi_bench.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
# Values checked here, one line and exit 2: they were a Python traceback (--latency-us abc),
# bash's "unbound variable" (--np abc) or SimGrid's platform parse error and abort (--np 0).
bad_value() { echo "smpi_bench.sh: $1 $2: $3 (see --help)" >&2; exit 2; }
number() {  # a decimal number (no inf, nan or sign) > 0, or >= 0 with $2 = 0ok
  awk -v v="$1" -v zero="${2:-}" 'BEGIN {
    ok = v ~ /^([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][-+]?[0-9]+)?$/
    exit !(ok && (v + 0 > 0 || zero == "0ok")) }'
}
positive() { number "$1"; }
[[ "$nps" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] ||
  bad_value --np "$nps" "expected process counts >= 1, comma-separated (4,16,64)"
positive "$bw" || bad_value --bandwidth-gbps "$bw" "expected a number > 0"
# 0 is a network without latency (SimGrid takes lat="0us"): the model's bandwidth term alone
number "$lat" 0ok || bad_value --latency-us "$lat" "expected a number >= 0"
positive "$test_s" || bad_value --smpi-test-s "$test_s" "expected a number > 0"
if ! command -v smpirun >/dev/null 2>&1; then
  echo "smpi_bench.sh: smpirun not found (SimGrid: apt-get install libsimgrid-dev); skipping" >&2
  exit 77
fi
if [ ! -f "$bin" ]; then
  # scripts/quickstart.sh builds only the starring executable; this is target starring_smpi_bench
  echo "smpi_bench.sh: $bin not built: run scripts/build.sh (everything) or" \
    "scripts/build.sh --target starring_smpi_bench" >&2
  exit 2
fi

[ -z "$json_out" ] || set -- "$@" --json
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
half_lat=$(python3 -c "print($lat / 2)")
cfg=(--cfg=network/model:CM02 --cfg=network/crosstraffic:0 --cfg=smpi/coll-selector:"$selector"
     --cfg=smpi/test:"$test_s" --cfg=smpi/grow-injected-times:no
     --log=root.thres:warning --log=smpi_config.thres:error)
if [ "$compute" = 1 ]; then
  cfg+=(--cfg=smpi/simulate-computation:yes --cfg=smpi/host-speed:1Gf)  # hosts are 1 Gflop/s
else
  cfg+=(--cfg=smpi/simulate-computation:no)
fi
compute_json=$([ "$compute" = 1 ] && echo true || echo false)
platform="{\"hosts\":\"cluster\",\"bandwidth_gbps\":$bw,\"latency_us\":$lat,\"net_model\":\"CM02\",\
\"coll_selector\":\"$selector\",\"smpi_test_s\":$test_s,\"compute\":$compute_json}"

rc=0
IFS=, read -ra np_list <<<"$nps"
for np in "${np_list[@]}"; do
  cat >"$tmp/platform.xml" <<EOF
<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<platform version="4.1">
  <cluster id="cluster" prefix="host" radical="0-$((np - 1))" suffix="" speed="1Gf"
           bw="${bw}Gbps" lat="${half_lat}us" sharing_policy="SPLITDUPLEX"/>
</platform>
EOF
  for ((i = 0; i < np; i++)); do echo "host$i"; done >"$tmp/hosts"
  echo "# smpirun -np $np: cluster of $np hosts, ${bw} Gb/s links, ${lat} us host to host," \
       "MPI_Allreduce by the '$selector' selector, computation $([ "$compute" = 1 ] && echo \
       "charged" || echo "free")"
  set +e
  smpirun -np "$np" -platform "$tmp/platform.xml" -hostfile "$tmp/hosts" \
    "${cfg[@]}" ${extra_cfg[@]+"${extra_cfg[@]}"} "$bin" "$@" >"$tmp/out"
  r=$?
  set -e
  grep -v '^{' "$tmp/out" || true
  if [ -n "$json_out" ]; then
    grep '^{' "$tmp/out" | sed "s/}\$/,\"platform\":${platform//\//\\/}}/" >>"$json_out" || true
  else
    grep '^{' "$tmp/out" || true
  fi
  [ $r -eq 0 ] || { echo "smpi_bench.sh: np $np failed (exit $r)" >&2; rc=$r; }
done
exit $rc
