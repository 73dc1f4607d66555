#!/usr/bin/env bash
# The one GPU check: everything StarRing's CUDA/NCCL path must show on a machine with a GPU, in
# one run of at most ~8 minutes, written under $OUT (the device tool's result folder).
#
# Where the binaries come from: the GPU machine of the device tool has CUDA 13, cuBLAS and NCCL
# (PyTorch's wheels) but no Open MPI, Boost or OpenBLAS, so nothing is built there. Here, before
# the run:
#   scripts/device_bundle.sh            # builds build-gpurev (-DSTARRING_CUDA=ON), packs
#                                       # .devbundle/bundle.tar.xz (binaries, libraries, Open MPI
#                                       # run-time, Fashion-MNIST), ~40 MiB, git-ignored
# then one device call:  run(command="bash scripts/device_check.sh", carry=[".devbundle"],
# timeout_s=600). Without a bundle the script uses build-gpurev/ and the system's libraries
# (a run on this machine: every GPU step then shows the CPU fallback or a clean skip).
#
# MPI without mpirun: the binaries call MPI_Init_thread; a singleton start needs no mpirun but
# Open MPI 4 starts an orted for it unless OMPI_MCA_ess_singleton_isolated=1 (set here), and
# finds its components/help texts through OPAL_PKGLIBDIR/OPAL_PKGDATADIR pointing into the
# bundle. The two-rank check uses the bundled mpirun through scripts/mpirun.sh.
#
# Steps (each under its own time limit; a failure does not stop the others):
#   gpu        nvidia-smi; the shared libraries resolve (cuBLAS/NCCL found on the machine)
#   env        starring env (GPUs, driver/runtime, cuBLAS, NCCL)
#   t_*        the GPU tests: tests/gpu (CUDA vs CPU, large launches, nccl, GPU-model training)
#              and the CUDA/NCCL cases of test_device, test_mlp and test_ring
#   np2_1gpu   mpirun -np 2 with the nccl backend on one GPU (CUDA_VISIBLE_DEVICES=0, so also
#              on a machine with several): a clear ConfigError, no hang
#   mgpu_*     only with G >= 2 GPUs (at most 8): the nccl engine's closed-form all-reduce
#              (tests/gpu and test_ring) under mpirun -np G, one GPU per rank; bench --backends
#              nccl and one training epoch with --backend nccl on G ranks (ranks 1.. use cuda:1..)
#   bench      starring bench --backends nccl -b 1M -e 256M, np 1
#   bmodel_*   starring bench-model --device cuda, then --device cpu
#   train_*    Fashion-MNIST (or --dataset synthetic without data), 1 epoch, --device cuda with
#              the local and nccl backends, and the CPU for the same steps; then 4 ranks (ring)
#              and 2 workers + 1 server (ps) sharing the GPU for compute
# Verdicts: PASS; FAIL (non-zero exit; a GPU test that skipped counts: on this machine it means
# the GPU path did not run); FALLBACK (a --device cuda run that used the CPU); SKIPPED (a test
# binary under mpirun, or a sweep, that skipped everything); TIMEOUT; SKIP (no budget left).
# The bundle's binaries need glibc >= 2.36 and libstdc++ with GLIBCXX_3.4.30 on the GPU machine
# (Debian 12 / Ubuntu 24.04 have them; Ubuntu 22.04's glibc 2.35 does not: the bundled libevent
# uses arc4random); `gpu` shows any library that does not resolve.
# Output ($OUT, at most 8 files): device_check.log (everything), summary.txt (one line per step),
# results.tar.gz (each step's output with the bench rows as --json lines, gtest XML, training
# JSON summaries).
# The whole run keeps to DEVICE_CHECK_BUDGET_S (default 480 s): a step gets at most what is left
# (steps that no longer fit are reported SKIP), so the device call (timeout_s 600) always returns
# the log and the summary.
#   scripts/device_check.sh [--dry-run] [--quick | --scale | --gpu-sweep | --torch]
#     --dry-run  print the steps and their commands, run nothing
#     --quick    skip the bench and the training steps (tests and env only)
#     --scale    instead of the checks: the Fashion-MNIST recipe (experiments/fmnist_mlp.ini) on
#                the GPU, then the scaling sweep (1/2/4/8 workers x every backend x both models,
#                20 steps a run instead of 60) with its report, on the GPU machine's cores;
#                results and report in $OUT/scaling.tar.gz
#     --gpu-sweep instead of the checks: the gpu_shared sweep (star vs ring with the wide MLP on
#                the GPU, ranks sharing it, host backends) with its report, in
#                $OUT/gpu_shared.tar.gz
#     --torch    instead of the checks: `starring bench-model` next to PyTorch's own training
#                step on the same MLPs (scripts/torch_baseline.py), one CPU thread and the GPU,
#                then the Fashion-MNIST recipe on the GPU
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
dry=0
quick=0
scale=0
torch=0
gpu_sweep=0
budget=${DEVICE_CHECK_BUDGET_S:-480}  # whole run; steps are cut to what is left
for a in "$@"; do
  case $a in
    --dry-run) dry=1 ;;
    --quick) quick=1 ;;
    --scale) scale=1 ;;
    --torch) torch=1 ;;
    --gpu-sweep) gpu_sweep=1 ;;
    -h | --help) sed -n '2,/^set -uo pipefail/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "device_check: unknown argument $a" >&2; exit 2 ;;
  esac
done
if [ $((scale + torch + gpu_sweep)) -gt 1 ]; then
  echo "device_check: --scale, --torch and --gpu-sweep are separate runs: give one" >&2
  exit 2
fi
OUT=${OUT:-/tmp/device_check_out}  # the device tool sets OUT
mkdir -p "$OUT"
res=$(mktemp -d)  # results to pack into $OUT/results.tar.gz
log=$OUT/device_check.log
summary=$OUT/summary.txt
: > "$summary"
# Everything goes to the log; the console (fd 3: the device tool's output tail) gets one line
# per step and, for a step that did not pass, the end of its output.
exec 3>&1
[ "$dry" = 1 ] || exec > "$log" 2>&1
t_start=$(date +%s)
echo "device_check: $(date -u) on $(hostname), repo $(git rev-parse --short HEAD 2> /dev/null)"

# ---- binaries and libraries ---------------------------------------------------------------
bundle=$root/.devbundle/bundle.tar.xz
unpacked=  # the bundle's folder, removed at the end
if [ -r "$bundle" ]; then
  # A folder of this run's own: with one fixed path, two runs on one machine (helpers trying the
  # script on the build host) deleted each other's binaries mid-run.
  work=$(mktemp -d "${TMPDIR:-/tmp}/starring-device.XXXXXX")
  unpacked=$work
  if [ "$dry" = 0 ]; then
    if command -v xz > /dev/null; then
      tar -C "$work" -xJf "$bundle"
    else  # images without xz-utils: Python's tarfile reads xz itself
      python3 -c 'import sys, tarfile
t = tarfile.open(sys.argv[1])
try:
    t.extractall(sys.argv[2], filter="fully_trusted")
except TypeError:
    t.extractall(sys.argv[2])' "$bundle" "$work"
    fi
  fi
  bin=$work/bin
  data_dir=$work/data
  echo "device_check: bundle of commit $(cat "$work/COMMIT" 2> /dev/null) unpacked in $work"
  export LD_LIBRARY_PATH=$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PATH=$bin:$PATH  # the bundled mpirun for scripts/mpirun.sh
  export OPAL_PKGLIBDIR=$work/ompi/lib OPAL_PKGDATADIR=$work/ompi/share \
    OPAL_SYSCONFDIR=$work/ompi/etc OPAL_BINDIR=$bin OPAL_LIBDIR=$work/lib
  export PMIX_MCA_mca_base_component_path=$work/ompi/pmix
else
  work=$root/build-gpurev
  bin=$work/bin
  data_dir=/usr/share/datasets/fashion-mnist
  echo "device_check: no $bundle: using $work and this machine's libraries"
  for t in test_gpu_device test_gpu_nccl test_gpu_training test_device test_mlp test_ring; do
    f=$(find "$work/tests" -maxdepth 2 -type f -name "$t" 2> /dev/null | head -n 1)
    [ -n "$f" ] && { mkdir -p "$res/bin"; ln -sf "$f" "$res/bin/$t"; }
  done
fi
tbin() { [ -x "$bin/$1" ] && echo "$bin/$1" || echo "$res/bin/$1"; }
# cuBLAS and NCCL are the machine's: the toolkit's folders and the pip wheels' (PyTorch).
find_lib_dirs() {
  local roots=(/usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib)
  local py
  for py in python3 /opt/torch/.venv/bin/python3; do
    command -v "$py" > /dev/null || continue
    mapfile -t -O "${#roots[@]}" roots < <("$py" -c \
      'import site; print("\n".join(site.getsitepackages()))' 2> /dev/null)
  done
  local known
  known=$(ldconfig -p 2> /dev/null)
  for lib in libcublas.so.13 libcublasLt.so.13 libnccl.so.2 libcudart.so.13; do
    [[ $known == *"$lib "* ]] && continue
    find "${roots[@]}" -maxdepth 4 -name "$lib" 2> /dev/null | head -n 1 | xargs -r dirname
  done | awk '!seen[$0]++' | paste -sd:
}
extra=$(find_lib_dirs)
[ -n "$extra" ] && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$extra
# Open MPI: a singleton needs no orted; shared memory only; quiet about components it skips.
export OMPI_MCA_ess_singleton_isolated=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 \
  OMPI_MCA_mca_base_component_show_load_errors=0 OMPI_MCA_btl_vader_single_copy_mechanism=none \
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  PMIX_MCA_pcompress_base_silence_warning=1
export NCCL_DEBUG=${NCCL_DEBUG:-WARN} NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
export OPENBLAS_NUM_THREADS=1
sr=$bin/starring
echo "device_check: LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"

# ---- step runner ----------------------------------------------------------------------------
fails=0
# step NAME LIMIT_S CMD...: runs CMD under `timeout`, logs it, appends a line to summary.txt.
step() {
  local name=$1 limit=$2
  shift 2
  echo
  echo "=== $name (limit ${limit}s): $*"
  if [ "$dry" = 1 ]; then
    echo "DRY   $name" >> "$summary"
    echo "$name: $*" >&3
    return 0
  fi
  local left=$((budget - ($(date +%s) - t_start)))
  if [ "$left" -lt 20 ]; then
    printf '%-8s %-16s (%d s of the %d s budget left)\n' SKIP "$name" "$left" "$budget" |
      tee -a "$summary" >&3
    fails=$((fails + 1))
    return 0
  fi
  [ "$limit" -gt $((left - 10)) ] && limit=$((left - 10))
  local t0 rc verdict
  t0=$(date +%s%N)
  # bash -c so that NAME may be one of the functions below (exported), not only a program.
  timeout -k 10 "$limit" bash -c '"$@"' "$name" "$@" 2>&1 | tee "$res/$name.txt"
  rc=${PIPESTATUS[0]}
  verdict=PASS
  [ $rc -ne 0 ] && verdict=FAIL
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && verdict=TIMEOUT
  # A --device cuda run that fell back to the CPU ran, but not on the GPU (fmnist_cuda takes
  # --device cuda from a function, not from this command line).
  if [ $verdict = PASS ] && [[ " $* " == *" --device cuda "* || $name == fmnist_cuda ]] &&
    grep -q "no usable CUDA device" "$res/$name.txt"; then
    verdict=FALLBACK
  fi
  # A sweep's runs write their output to runs/*/log.txt, not to the sweep's console: a run of a
  # `device = cuda` sweep that fell back says so there (runs on the CPU by choice never do).
  if [ $verdict = PASS ] && [[ $name == sweep_* ]] &&
    grep -rqs --include=log.txt "no usable CUDA device" "$res"; then
    verdict=FALLBACK
  fi
  # A test binary run directly (under mpirun, not through gtest below) exits 0 when its tests
  # skip ("fewer GPUs than ranks", no NCCL): on this machine that means the path did not run.
  if [ $verdict = PASS ] && grep -q '^\[  SKIPPED \]' "$res/$name.txt"; then
    verdict=SKIPPED
  fi
  # A sweep whose runs were all skipped (sweep.py counts them as fine: e.g. nvidia-smi lists no
  # GPU, so every `requires = shared-gpu` run is skipped) passed without running anything: its
  # counts are skipped runs only ('done in 1 s: 19 skipped; records in ...') or none. Any other
  # count ran something ('2 bench ok' included, which the former '[0-9]+ ok' test missed).
  if [ $verdict = PASS ] &&
    grep -qE '^\[sweep\] done in [0-9]+ s: ([0-9]+ skipped)?; records in ' "$res/$name.txt"; then
    verdict=SKIPPED
  fi
  [ $verdict = PASS ] || fails=$((fails + 1))
  local ms=$((($(date +%s%N) - t0) / 1000000))
  printf '%-8s %-16s %4d.%d s  rc %d\n' "$verdict" "$name" $((ms / 1000)) $((ms % 1000 / 100)) \
    "$rc" | tee -a "$summary" >&3
  if [ $verdict != PASS ]; then
    echo "--- last lines of $name:" >&3
    grep -v "^\[ *\(RUN\|OK\|SKIPPED\) *\]" "$res/$name.txt" | tail -n 15 >&3
  fi
}
# expect_fail_with TEXT CMD...: passes when CMD fails and its output contains TEXT. The output
# is passed on as it comes (it was held in a variable until CMD ended, so a CMD that hung until
# the step's timeout left no output at all: nothing to tell where it hung).
expect_fail_with() {
  local text=$1
  shift
  local o rc
  o=$(mktemp "$res/expect.XXXXXX")  # in the results folder, removed at the end even if killed
  "$@" 2>&1 | tee "$o"
  rc=${PIPESTATUS[0]}
  [ $rc -ne 0 ] && grep -qF "$text" "$o"
  rc=$?
  rm -f "$o"
  return $rc
}
# gtest NAME [FILTER]: one test binary, XML into the results. On the GPU machine a skipped test
# means the GPU path did not run: it fails the step (exit 3) after the test's own verdict.
gtest() {
  local b rc skipped
  b=$(tbin "$1")
  "$b" --gtest_output="xml:$res/$1.xml" ${2:+--gtest_filter=$2} --gtest_color=no
  rc=$?
  [ $rc -ne 0 ] && return $rc
  skipped=$(grep -c 'result="skipped"' "$res/$1.xml")
  [ "$skipped" = 0 ] && return 0
  echo "device_check: $skipped test(s) of $1 skipped: the GPU path did not run"
  return 3
}
libs_resolve() {
  local missing
  missing=$(ldd "$sr" "$(tbin test_gpu_device)" 2>&1 | grep "not found" | sort -u)
  [ -z "$missing" ] && return 0
  echo "unresolved libraries:"
  echo "$missing"
  echo "candidates on this machine:"
  find / -xdev \( -name 'libnccl.so*' -o -name 'libcublas*.so*' -o -name 'libcudart.so*' \) \
    2> /dev/null | head -20
  return 1
}
gpu_info() {
  local rc=0
  nvidia-smi || rc=1
  grep -m1 "model name" /proc/cpuinfo
  # The bundle is built for x86-64-v3 (device_bundle.sh): AVX2, FMA, BMI2.
  local f
  for f in avx2 fma bmi2; do
    grep -qw "$f" /proc/cpuinfo || { echo "this CPU lacks $f: the bundle's binaries" \
      "(-march=$(cat "$work/MARCH" 2> /dev/null || echo '?')) may die with SIGILL"; rc=1; }
  done
  libs_resolve || rc=1
  return $rc
}
# MakeDevice.FallbackLineIsOneWrite is left out: it skips wherever a GPU is usable (no fallback
# line to check), and gtest() fails a step with a skipped test, so on the GPU machine it failed
# t_cuda_cases and stopped the chain before test_mlp and test_ring ran.
cuda_cases() {  # the CUDA/NCCL cases of the other areas' test binaries
  gtest test_device 'CudaVsCpu.*:MakeDevice.*-MakeDevice.FallbackLineIsOneWrite' &&
    gtest test_mlp 'Mlp.CudaStepMatchesCpu' &&
    gtest test_ring 'NcclEngine.*'
}
export -f gtest tbin libs_resolve gpu_info cuda_cases expect_fail_with
export bin res sr work

# ---- the checks ------------------------------------------------------------------------------
step gpu 30 gpu_info
fmnist_cuda() {
  "$sr" train --config experiments/fmnist_mlp.ini --data-dir "$data_dir" --device cuda \
    --progress lines --log-every 2000 --summary-file "$res/fmnist_cuda.json"
}
export -f fmnist_cuda
export data_dir
# The sweeps' report (scripts/report.py) needs matplotlib, which a PyTorch image's python3
# usually lacks: there the report failed, which made sweep.py exit 1 and the step FAIL although
# every run had passed. Without matplotlib the report is left out and drawn here afterwards
# (scripts/report.py on the unpacked folder).
no_report=()
if [ "$dry" = 0 ] && ! python3 -c 'import matplotlib' 2> /dev/null; then
  no_report=(--no-report)
  echo "device_check: python3 has no matplotlib: the sweeps run with --no-report (draw it here)"
fi
if [ "$torch" = 1 ]; then
  step env 30 "$sr" env
  step bmodel_cpu1 60 "$sr" bench-model --device cpu --threads 1 --json
  step torch_cpu1 60 python3 scripts/torch_baseline.py --device cpu --threads 1 \
    --json "$res/torch_cpu1.jsonl"
  step bmodel_cuda 60 "$sr" bench-model --device cuda --json
  step torch_cuda 60 python3 scripts/torch_baseline.py --device cuda --json "$res/torch_cuda.jsonl"
  step fmnist_cuda 60 fmnist_cuda
elif [ "$gpu_sweep" = 1 ]; then
  step sweep_gpu 400 python3 scripts/sweep.py gpu_shared --bin "$sr" --out "$res/gpu_shared" \
    --timeout 120 "${no_report[@]}"
  [ "$dry" = 1 ] || tar -C "$res" -czf "$OUT/gpu_shared.tar.gz" gpu_shared 2> /dev/null
elif [ "$scale" = 1 ]; then
  step fmnist_cuda 60 fmnist_cuda
  mkdir -p "$res/sweeps"
  sed 's/^max-steps = 60/max-steps = 20/' experiments/sweeps/scaling.ini > "$res/sweeps/scaling.ini"
  step sweep_scaling 380 python3 scripts/sweep.py "$res/sweeps/scaling.ini" --bin "$sr" \
    --out "$res/scaling" --timeout 90 "${no_report[@]}"
  [ "$dry" = 1 ] || tar -C "$res" -czf "$OUT/scaling.tar.gz" scaling 2> /dev/null
else  # the checks
  step env 30 "$sr" env
  step t_gpu_device 150 gtest test_gpu_device
  step t_gpu_nccl 90 gtest test_gpu_nccl
  step t_gpu_training 120 gtest test_gpu_training
  step t_cuda_cases 90 cuda_cases
  step np2_1gpu 90 expect_fail_with "needs one GPU per rank" env CUDA_VISIBLE_DEVICES=0 \
    bash scripts/mpirun.sh -np 2 "$sr" bench --device cuda --backends nccl -b 1M -e 1M -n 2 -w 1 \
    --timeout 30
  # NCCL with one rank per GPU, on every GPU of the machine (up to 8); a dry run lists them as
  # for 2 GPUs.
  ngpu=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU ')
  [ "$dry" = 1 ] && [ "$ngpu" -lt 2 ] && ngpu=2
  [ "$ngpu" -gt 8 ] && ngpu=8
  if [ "$ngpu" -ge 2 ]; then
    mpi=(bash scripts/mpirun.sh -np "$ngpu")
    step mgpu_t_nccl 90 "${mpi[@]}" "$(tbin test_gpu_nccl)" --gtest_filter=GpuNccl.ClosedForm*
    step mgpu_t_ring 90 "${mpi[@]}" "$(tbin test_ring)" --gtest_filter=NcclEngine.ClosedForm*
    step mgpu_bench 90 "${mpi[@]}" "$sr" bench --device cuda --backends nccl -b 1M -e 256M \
      --json --timeout 60
  else
    echo "device_check: $ngpu GPU(s): the multi-GPU steps (mgpu_*) need 2 or more"
  fi
  if [ "$quick" = 0 ]; then
    step bench_nccl 120 "$sr" bench --device cuda --backends nccl -b 1M -e 256M --json
    step bmodel_cuda 60 "$sr" bench-model --device cuda --json
    step bmodel_cpu 60 "$sr" bench-model --device cpu --threads 8 --json
    data=(--dataset fashion-mnist --data-dir "$data_dir")
    [ -r "$data_dir/train-images-idx3-ubyte.gz" ] || data=(--dataset synthetic)
    train=("$sr" train "${data[@]}" --epochs 1 --batch 128 --progress lines --log-every 100)
    step train_cuda 60 "${train[@]}" --device cuda --summary-file "$res/train_cuda.json"
    # NCCL_DEBUG=INFO (ENV): NCCL's own line that it read NCCL_ALGO=Ring (--nccl-force-ring).
    step train_nccl 60 env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV "${train[@]}" --device cuda \
      --backend nccl --nccl-force-ring --summary-file "$res/train_nccl.json"
    step train_cpu 90 "${train[@]}" --device cpu --threads 8 --summary-file "$res/train_cpu.json"
    # Several ranks sharing the one GPU for compute, gradients through the host backends.
    step train_np4_ring 90 bash scripts/mpirun.sh -np 4 "${train[@]}" --device cuda --backend ring \
      --summary-file "$res/train_np4_ring.json"
    step train_np3_ps 90 bash scripts/mpirun.sh -np 3 "${train[@]}" --device cuda --backend ps \
      --servers 1 --summary-file "$res/train_np3_ps.json"
    [ "$ngpu" -ge 2 ] && step mgpu_train_nccl 90 bash scripts/mpirun.sh -np "$ngpu" "${train[@]}" \
      --device cuda --backend nccl --summary-file "$res/mgpu_train_nccl.json"
  fi
fi

echo
echo "=== summary ($(($(date +%s) - t_start)) s)"
cat "$summary"
if [ "$dry" = 0 ]; then
  tar -C "$res" -czf "$OUT/results.tar.gz" --exclude=./bin --exclude=./scaling \
    --exclude=./gpu_shared . 2> /dev/null
  {
    echo "device_check: $fails step(s) did not pass, $(($(date +%s) - t_start)) s;" \
      "full log $log, per-step output and JSON in $OUT/results.tar.gz"
    for f in bench_nccl bmodel_cpu1 torch_cpu1 bmodel_cuda torch_cuda bmodel_cpu train_cuda \
      train_nccl train_cpu train_np4_ring train_np3_ps mgpu_bench mgpu_train_nccl fmnist_cuda; do
      [ -r "$res/$f.txt" ] || continue
      echo "--- $f"
      grep -v -E '^(step [0-9]+/|\[starring\])' "$res/$f.txt" | tail -n 14
    done
  } >&3
fi
rm -rf "$res" ${unpacked:+"$unpacked"}
[ "$fails" = 0 ]
