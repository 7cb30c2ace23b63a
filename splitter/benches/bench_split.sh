#!/bin/sh
# Benchmark of `split-binary` on Debian's librocsparse.so.0.1 (1.3 GB, 111
# bundles, 777 code objects): prints wall, CPU, peak RSS, bytes in/out and
# `zstd -3 -T0` on the raw .hip_fatbin bytes measured in the same run.
#
#   splitter/benches/bench_split.sh [FILE] [--level N]
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then
  file=$1
  shift
else
  "$root/tests/scripts/fetch-debian-testdata.sh" librocsparse0 >&2
  cache=${ROCM_KPACK_TESTDATA:-$root/target/debian-cache}
  file=$(ls -d "$cache"/extracted/librocsparse0_*/usr/lib/x86_64-linux-gnu/librocsparse.so.0.1 | head -n 1)
fi
cd "$root"
exec cargo run --release -q -p rocm-kpack-splitter --example bench_split -- "$file" "$@"
