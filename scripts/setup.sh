#!/usr/bin/env bash
# Installs what a fresh Debian 12 / Ubuntu machine lacks to build and run StarRing.
# Idempotent: packages already present are skipped; apt is only touched when something is missing.
# Works as root or as a normal user with sudo.
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
  libsimgrid-dev  # SimGrid SMPI (smpicxx, smpirun): smpi_bench.so and the smpi test, optional
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "[setup] all packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "[setup] error: missing packages: ${missing[*]}. Installing them needs root, and this" \
      "user is not root and has no sudo: ask an administrator to run" \
      "'apt-get install ${missing[*]}' (or run this script as root), then run this again." >&2
    exit 1
  fi
fi
echo "[setup] installing: ${missing[*]}"
# DEBIAN_FRONTEND goes on apt-get's command line: sudo's default env_reset (Debian's sudoers)
# drops an exported one, and a debconf question would then wait for an answer.
apt=(env DEBIAN_FRONTEND=noninteractive apt-get)
$SUDO "${apt[@]}" update -q
$SUDO "${apt[@]}" install -y -q --no-install-recommends "${missing[@]}"
echo "[setup] done"
