#!/bin/sh
# Builds the runtime crates (rocm-kpack-format, rocm-kpack and the C ABI
# rocm-kpack-capi) for x86_64-pc-windows-gnu with Debian's mingw-w64 and runs
# their tests under Wine (Debian's wine64). Called by scripts/test.sh; extra
# arguments go to `cargo test` (e.g. a test name filter).
#
# Wine's first start creates its prefix slowly; the prefix lives in
# target/wine/prefix and is reused. WINEDEBUG=-all keeps Wine's own
# diagnostics out of the test output.
set -eu

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

wine=$(command -v wine64 || command -v wine || echo /usr/lib/wine/wine64)
[ -x "$wine" ] || { echo "windows-tests: wine64 not found (apt-get install wine64)" >&2; exit 2; }
command -v x86_64-w64-mingw32-gcc >/dev/null 2>&1 ||
  { echo "windows-tests: x86_64-w64-mingw32-gcc not found (apt-get install mingw-w64)" >&2; exit 2; }
if command -v rustup >/dev/null 2>&1 && ! rustup target list --installed | grep -qx x86_64-pc-windows-gnu; then
  rustup target add x86_64-pc-windows-gnu
fi

export WINEPREFIX="${WINEPREFIX:-$root/target/wine/prefix}"
export WINEDEBUG=-all
export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_LINKER=x86_64-w64-mingw32-gcc
export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER="$wine"
if [ ! -d "$WINEPREFIX/drive_c/windows/system32" ]; then
  mkdir -p "$WINEPREFIX"
  "$wine" wineboot --init >/dev/null 2>&1 || true
fi
# Wine 8 has no bcryptprimitives.dll, whose ProcessPrng every Rust program
# imports; the fixture shim provides it (newer Wine has its own).
if [ ! -e /usr/lib/x86_64-linux-gnu/wine/x86_64-windows/bcryptprimitives.dll ]; then
  cp tests/fixtures/windows/wine/bcryptprimitives.dll "$WINEPREFIX/drive_c/windows/system32/"
fi

# Libraries and their tests; the examples are Linux benchmarks (dlopen of
# librocm_kpack.so).
cargo test --target x86_64-pc-windows-gnu -p rocm-kpack-format -p rocm-kpack-loader -p rocm-kpack-capi --lib --tests "$@"
