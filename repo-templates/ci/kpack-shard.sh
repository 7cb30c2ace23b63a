#!/bin/sh
# The map step of kpack-release.yml: split every artifact directory under
# ARTIFACTS and pack the split outputs (with their modes and times) into
# SHARD_TAR for upload.
#
#   kpack-shard.sh ARTIFACTS SHARD_TAR
#
# Environment: KPACK_MEMORY (rocm-kpack --memory), KPACK_JOBS (--jobs),
# ROCM_KPACK (the program, default rocm-kpack).
set -eu
[ $# -eq 2 ] || { echo "usage: kpack-shard.sh ARTIFACTS SHARD_TAR" >&2; exit 2; }
kpack=${ROCM_KPACK:-rocm-kpack}
out=$(mktemp -d "${TMPDIR:-/tmp}/kpack-shard.XXXXXX")
trap 'rm -rf "$out"' EXIT
"$kpack" split "$1" --batch --out "$out/split" -q \
  ${KPACK_MEMORY:+--memory "$KPACK_MEMORY"} ${KPACK_JOBS:+--jobs "$KPACK_JOBS"}
tar -C "$out/split" -cf "$2" .
