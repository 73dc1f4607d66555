#!/usr/bin/env bash
# Installs what a fresh Debian 12 / Ubuntu machine lacks to build and run StarRing.
# Idempotent: packages already present are skipped; apt is only touched when something is missing.
# Works as root or as a normal user with sudo; without either, only optional ones may be missing.
#   scripts/setup.sh        (no arguments; -h/--help prints this)
set -euo pipefail
case "${1:-}" in  # before any package is checked or installed
  "") ;;
  -h|--help)  # the lines above, with bash alone (no sed: it may be what is missing)
    n=0
    while IFS= read -r line && [ $((n += 1)) -le 5 ]; do
      [ "$n" -ge 2 ] && printf '%s\n' "${line#\# }"
    done < "$0"
    exit 0 ;;
  *) echo "setup.sh: unknown argument '$1' (it takes none)" >&2; exit 2 ;;
esac

PKGS=(
  build-essential cmake pkg-config git
  openmpi-bin libopenmpi-dev
  libboost-program-options-dev
  libgtest-dev googletest
  libopenblas-dev
  zlib1g-dev
  nlohmann-json3-dev
  python3 python3-matplotlib python3-numpy
  dataset-fashion-mnist
)
# Installed where it can be; where it cannot (not root, no sudo), a note and the rest goes on.
OPTIONAL=(
  libsimgrid-dev  # SimGrid SMPI (smpicxx, smpirun): smpi_bench.so and the smpi test (Skipped without)
)

# Not Debian/Ubuntu (no dpkg-query): no package can be checked or installed by name. What can be
# checked without a package manager is, so that a machine lacking it stops here with one line
# rather than minutes later; the libraries are left to the build's CMake step, which names any
# that it cannot find.
if ! command -v dpkg-query >/dev/null 2>&1; then
  lacks=()
  for c in cmake make c++ mpicxx mpirun python3; do
    command -v "$c" >/dev/null 2>&1 || lacks+=("$c")
  done
  if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import matplotlib' >/dev/null 2>&1; then
    lacks+=("python3's matplotlib")
  fi
  data=/usr/share/datasets/fashion-mnist
  for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte \
    t10k-labels-idx1-ubyte; do
    if [ ! -r "$data/$f.gz" ] && [ ! -r "$data/$f" ]; then
      lacks+=("Fashion-MNIST in $data ($f.gz)"); break
    fi
  done
  if [ ${#lacks[@]} -gt 0 ]; then
    list=$(printf '%s; ' "${lacks[@]}")
    echo "[setup] error: this is not a Debian/Ubuntu machine (no dpkg-query), so nothing can be" \
      "installed from here, and it lacks: ${list%; }. Install" \
      "them with this system's package manager (Debian's names: ${PKGS[*]}), then run this" \
      "again." >&2
    exit 1
  fi
  echo "[setup] not a Debian/Ubuntu machine (no dpkg-query): the commands and the data set are" \
    "here; the build's CMake step checks the libraries (Debian's names: ${PKGS[*]})"
  exit 0
fi

installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}
missing=() optional=()
for p in "${PKGS[@]}"; do installed "$p" || missing+=("$p"); done
for p in "${OPTIONAL[@]}"; do installed "$p" || optional+=("$p"); done

if [ $((${#missing[@]} + ${#optional[@]})) -eq 0 ]; then
  echo "[setup] all packages present"
  exit 0
fi

all=(${missing[@]+"${missing[@]}"} ${optional[@]+"${optional[@]}"})
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; elif [ ${#missing[@]} -eq 0 ]; then
    echo "[setup] all required packages present; optional ${optional[*]} is not installed" \
      "(and this user is not root and has no sudo): its parts are not built and their tests" \
      "report Skipped ('apt-get install ${optional[*]}' as root adds them)"
    exit 0
  else
    echo "[setup] error: missing packages: ${missing[*]}. Installing them needs root, and this" \
      "user is not root and has no sudo: ask an administrator to run" \
      "'apt-get install ${all[*]}' (or run this script as root), then run this again." >&2
    exit 1
  fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "[setup] error: missing packages: ${all[*]}, and this machine has no apt-get to install" \
    "them: install them with this system's package manager, then run this again." >&2
  exit 1
fi
echo "[setup] installing: ${all[*]}"
# DEBIAN_FRONTEND goes on apt-get's command line: sudo's default env_reset (Debian's sudoers)
# drops an exported one, and a debconf question would then wait for an answer.
apt=(env DEBIAN_FRONTEND=noninteractive apt-get)
$SUDO "${apt[@]}" update -q
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO "${apt[@]}" install -y -q --no-install-recommends "${missing[@]}"
fi
# An optional package that this machine's sources lack (an Ubuntu without universe) is not worth
# failing the set-up for: it is installed on its own, and its failure is a note.
if [ ${#optional[@]} -gt 0 ] &&
  ! $SUDO "${apt[@]}" install -y -q --no-install-recommends "${optional[@]}"; then
  echo "[setup] note: optional ${optional[*]} could not be installed (above): its parts are not" \
    "built and their tests report Skipped"
fi
echo "[setup] done"
