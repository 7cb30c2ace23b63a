#!/bin/sh
# Builds AMD's reference C++ runtime (the library whose C ABI ours matches)
# from a checkout of its source, for the benchmark's check that every
# archive we publish or rebuild loads there byte for byte
# (`bench_download --reference-lib OUT/runtime/librocm_kpack.so`, see
# docs/packaging.md, "Benchmark: `bench-download`"):
#
#   tests/scripts/build-reference-runtime.sh SRC OUT
#
# SRC: the reference's source tree (its top-level CMakeLists.txt); it is not
# part of this repository and is not modified. OUT: the build directory.
# Run by hand, not by the test suite.
#
# Needs: cmake, a C++17 compiler, and the reference's dependencies:
#   apt-get install cmake g++ libmsgpack-cxx-dev libzstd-dev libboost-dev
# (libboost-dev: Debian 12's msgpack-cxx 4 depends on Boost's headers).
#
# Debian 12 ships msgpack-cxx 4 under the CMake package name `msgpack`
# (target `msgpackc-cxx`) and zstd 1.5.4 without the `zstd::libzstd`
# target; the reference asks for `msgpack-cxx` and `zstd::libzstd` (the
# names of newer releases). Where they are missing, OUT/cmake-shim holds
# small config files that map the new names onto the old ones.
set -eu

if [ $# -ne 2 ]; then
  echo "usage: $0 SRC OUT" >&2
  exit 2
fi
src=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
[ -f "$src/CMakeLists.txt" ] || { echo "$0: $src has no CMakeLists.txt" >&2; exit 2; }

# A package's config file anywhere CMake looks on this system.
has_config() {
  for d in /usr/lib/*/cmake /usr/lib/cmake /usr/share/cmake /usr/local/lib/cmake; do
    [ -d "$d" ] || continue
    if find "$d" -maxdepth 2 \( -name "$1Config.cmake" -o -name "$1-config.cmake" \) | grep -q .; then
      return 0
    fi
  done
  return 1
}

shim=$out/cmake-shim
extra=""
if ! has_config msgpack-cxx; then
  has_config msgpack || { echo "$0: neither msgpack-cxx nor msgpack (libmsgpack-cxx-dev) is installed" >&2; exit 1; }
  mkdir -p "$shim/msgpack-cxx"
  cat > "$shim/msgpack-cxx/msgpack-cxx-config.cmake" <<'EOF'
# msgpack-cxx 4 (package `msgpack`, target `msgpackc-cxx`) under the name
# msgpack-cxx 6 uses.
find_package(msgpack CONFIG REQUIRED)
if(NOT TARGET msgpack-cxx)
  add_library(msgpack-cxx INTERFACE IMPORTED)
  target_link_libraries(msgpack-cxx INTERFACE msgpackc-cxx)
endif()
EOF
  extra="$extra -Dmsgpack-cxx_DIR=$shim/msgpack-cxx"
fi

# zstd's config file, and whether it defines zstd::libzstd.
zstd_config=$(find /usr/lib/*/cmake/zstd /usr/lib/cmake/zstd /usr/local/lib/cmake/zstd \
  -maxdepth 1 -name zstdConfig.cmake 2>/dev/null | head -n 1)
[ -n "$zstd_config" ] || { echo "$0: zstd's CMake config (libzstd-dev) is not installed" >&2; exit 1; }
if ! grep -rqs 'zstd::libzstd[ )]' "$(dirname "$zstd_config")"; then
  mkdir -p "$shim/zstd"
  cat > "$shim/zstd/zstdConfig.cmake" <<EOF
# zstd < 1.5.6 names its targets libzstd_shared and libzstd_static only.
include("$zstd_config")
if(NOT TARGET zstd::libzstd)
  add_library(zstd::libzstd INTERFACE IMPORTED)
  target_link_libraries(zstd::libzstd INTERFACE zstd::libzstd_shared)
endif()
EOF
  extra="$extra -Dzstd_DIR=$shim/zstd"
fi

# shellcheck disable=SC2086 # $extra is a list of -D options without spaces.
cmake -S "$src" -B "$out" -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_TESTING=OFF -DBUILD_SHARED_LIBS=ON $extra
cmake --build "$out" -j "$(nproc)"
lib=$(find "$out" -name 'librocm_kpack.so' | head -n 1)
[ -n "$lib" ] || { echo "$0: no librocm_kpack.so under $out" >&2; exit 1; }
echo "$lib"
