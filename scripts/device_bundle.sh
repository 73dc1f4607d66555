#!/usr/bin/env bash
# Packs what scripts/device_check.sh needs on a GPU machine that has CUDA, cuBLAS and NCCL (the
# device tool's H200: PyTorch's CUDA 13 wheels) but no Open MPI, Boost, OpenBLAS or compilers
# for this project, into one git-ignored folder, .devbundle/, that the device tool carries:
#   bin/    starring and the GPU test binaries (built here with -DSTARRING_CUDA=ON), stripped,
#           plus mpirun/orted for the two-rank check;
#   lib/    the shared libraries they need that such a machine may lack (Open MPI, hwloc,
#           libevent, PMIx, Boost.Program_options, OpenBLAS, gfortran, cudart); never libc,
#           libstdc++ (the machine's newer one serves), cuBLAS or NCCL (hundreds of MiB: the
#           machine's own are found at run time);
#   ompi/   Open MPI's components (those whose libraries are all bundled), help texts and
#           config, found through OPAL_PKGLIBDIR/OPAL_PKGDATADIR/OPAL_SYSCONFDIR;
#   data/   Fashion-MNIST's four .gz files (--no-data leaves them out: --dataset synthetic).
# Everything is stored as one xz tarball (.devbundle/bundle.tar.xz, about 40 MiB with data) to
# stay well inside the device tool's 64 MiB per call. Usage (from anywhere):
#   scripts/device_bundle.sh [--build DIR] [--no-data] [--no-compile]
# then the device run:  carry [".devbundle"], command "bash scripts/device_check.sh".
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-gpurev
data=1
compile=1
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --no-data) data=0; shift ;;
    --no-compile) compile=0; shift ;;
    -h|--help) sed -n '2,/^set -euo pipefail/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "device_bundle: unknown argument $1" >&2; exit 2 ;;
  esac
done
tests=(test_gpu_device test_gpu_nccl test_gpu_training test_device test_mlp test_ring)
if [ "$compile" = 1 ]; then
  # Portable binaries: the GPU host's CPU is not this one (-march=native here emits AVX-512,
  # which AMD Zen 2/3 hosts, e.g. DGX A100, lack), and machine code for the usual GPUs.
  cmake -S "$root" -B "$build" -DSTARRING_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
    -DSTARRING_MARCH=x86-64-v3 -DCMAKE_CUDA_ARCHITECTURES="75;80;90" > /dev/null
  cmake --build "$build" -j2 --target starring "${tests[@]}"
fi
march=$(sed -n 's/^STARRING_MARCH:STRING=//p' "$build/CMakeCache.txt")
if [ -z "$march" ] || [ "$march" = native ]; then  # empty: configured before STARRING_MARCH
  echo "device_bundle: $build is built with -march=native (this CPU's instructions): reconfigure" \
    "with -DSTARRING_MARCH=x86-64-v3, or drop --no-compile" >&2
  exit 1
fi
if [[ $(ldd "$build/bin/starring") != *libnccl* ]]; then
  echo "device_bundle: $build/bin/starring is not built with CUDA and NCCL (-DSTARRING_CUDA=ON)" >&2
  exit 1
fi

out=$root/.devbundle
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"/{bin,lib,ompi,data}

# Binaries: starring and the tests (found wherever CMake put them in the build tree).
cp "$build/bin/starring" "$stage/bin/"
for t in "${tests[@]}"; do
  f=$(find "$build/tests" -maxdepth 2 -type f -name "$t" -perm -u+x | head -n 1)
  [ -n "$f" ] || { echo "device_bundle: $t not built in $build" >&2; exit 1; }
  cp "$f" "$stage/bin/"
done
cp "$(command -v orterun || command -v mpirun)" "$stage/bin/mpirun"
cp "$(command -v orted)" "$stage/bin/orted"
strip --strip-unneeded "$stage"/bin/* 2> /dev/null || true

# Open MPI's run-time files, from where this Open MPI says they are.
ompi_path() { ompi_info --path "$1" --parsable | sed -n "s/^path:$1://p"; }
pkglib=$(ompi_path pkglibdir)
cp -r "$(ompi_path pkgdatadir)" "$stage/ompi/share"
mkdir -p "$stage/ompi/etc"
cp "$(ompi_path sysconfdir)"/*.conf "$stage/ompi/etc/" 2> /dev/null || true
mkdir -p "$stage/ompi/lib"

# Libraries never bundled: the C/C++ runtime (the target's own), the driver, cuBLAS and NCCL.
skip='^(libc|libm|libdl|libpthread|librt|libutil|ld-linux-x86-64|libstdc\+\+|libgcc_s|libcuda|libcublas|libcublasLt|libnccl|linux-vdso)\.so'
deps() { ldd "$1" 2> /dev/null | awk '/=>/ && $3 ~ /^\// {print $3}'; }
add_libs() {
  local lib base
  for lib in $(deps "$1"); do
    base=$(basename "$lib")
    [[ $base =~ $skip ]] && continue
    [ -e "$stage/lib/$base" ] || cp -L "$lib" "$stage/lib/$base"
  done
}
for f in "$stage"/bin/*; do add_libs "$f"; done
# Components whose libraries are all bundled or base ones (not UCX, PSM, verbs, libfabric...).
bundled_ok='^(libopen-pal|libopen-rte|libmpi|libmca_common_|libhwloc|libevent|libudev|libz|libnuma|libpmix|libmunge|libbz2|libatomic|libuuid)'
for comp in "$pkglib"/mca_*.so; do
  ok=1
  for lib in $(deps "$comp"); do
    base=$(basename "$lib")
    [[ $base =~ $skip || $base =~ $bundled_ok ]] || { ok=0; break; }
  done
  [ "$ok" = 1 ] || continue
  cp "$comp" "$stage/ompi/lib/"
  add_libs "$comp"
done
# PMIx's own plugins (the ext3x component loads libpmix, which loads these).
pmixdir=$(dirname "$(readlink -f "$(ldconfig -p | awk '/libpmix.so.2 /{print $NF; exit}')")")
if [ -d "$pmixdir/pmix" ]; then cp -r "$pmixdir/pmix" "$stage/ompi/pmix"; fi

if [ "$data" = 1 ]; then
  src=/usr/share/datasets/fashion-mnist
  for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz \
    t10k-labels-idx1-ubyte.gz; do
    [ -r "$src/$f" ] || { echo "device_bundle: $src/$f missing (scripts/setup.sh)" >&2; exit 1; }
    cp "$src/$f" "$stage/data/"
  done
fi
git -C "$root" rev-parse HEAD > "$stage/COMMIT" 2> /dev/null || true
echo "${march:-unknown}" > "$stage/MARCH"

rm -rf "$out"
mkdir -p "$out"
# written beside and renamed into place: a bundle cut by a kill or a full disk is never found
part="$out/bundle.tar.xz.$(hostname).$$.tmp"
trap 'rm -rf "$stage" "$part"' EXIT
tar -C "$stage" -cf - . | xz -T2 -6 > "$part"
mv "$part" "$out/bundle.tar.xz"
echo "device_bundle: $(du -h "$out/bundle.tar.xz" | cut -f1) in $out/bundle.tar.xz" \
  "($(ls "$stage/bin" | wc -l) binaries, $(ls "$stage/lib" | wc -l) libraries," \
  "$(ls "$stage/ompi/lib" | wc -l) Open MPI components, data: $([ "$data" = 1 ] && echo yes || echo no))"
