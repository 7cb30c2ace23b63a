#!/bin/sh
# The reduce step of kpack-release.yml: unpack every shard tar under SHARDS,
# recombine them into OUT/release (artifact outputs: <name>_<component>_generic/
# and <name>_<component>_<tree>/), lay the stage prefixes of each out as one
# install tree per output tree (OUT/split/generic/, OUT/split/<tree>/),
# package those (OUT/pkgs) and publish apt and pip repositories and the
# kpack store (OUT/repo).
#
#   kpack-reduce.sh SHARDS OUT
#
# Environment: KPACK_VERSION (package version, required), KPACK_NAME
# (generic package name, default rocm-kpack-release), KPACK_MEMORY,
# KPACK_JOBS, SOURCE_DATE_EPOCH (every timestamp), ROCM_KPACK (the program),
# KPACK_STORE_CACHE (a directory kept between releases: the store's objects
# encoded at the release level, `publish --cache`).
set -eu
[ $# -eq 2 ] || { echo "usage: kpack-reduce.sh SHARDS OUT" >&2; exit 2; }
: "${KPACK_VERSION:?set KPACK_VERSION to the version of the packages}"
kpack=${ROCM_KPACK:-rocm-kpack}
shards=$1 out=$2
mkdir -p "$out/shards"
n=0
for t in "$shards"/*.tar; do
  [ -f "$t" ] || continue
  n=$((n + 1))
  mkdir "$out/shards/$n"
  tar -C "$out/shards/$n" -xf "$t"
done
[ "$n" -gt 0 ] || { echo "kpack-reduce.sh: no shard tars in $shards" >&2; exit 1; }
# One argument per shard directory, each quoted: OUT may hold spaces or
# glob characters, and an unquoted expansion would split it or pick up
# another directory's shards.
set --
i=1
while [ "$i" -le "$n" ]; do
  set -- "$@" "$out/shards/$i"
  i=$((i + 1))
done
"$kpack" recombine "$@" --out "$out/release" -q \
  ${KPACK_MEMORY:+--memory "$KPACK_MEMORY"} ${KPACK_JOBS:+--jobs "$KPACK_JOBS"}
"$(dirname "$0")/kpack-layout.sh" "$out/release" "$out/split"
"$kpack" package "$out/split" --name "${KPACK_NAME:-rocm-kpack-release}" --version "$KPACK_VERSION" \
  --format deb,wheel --out "$out/pkgs" -q
"$kpack" publish "$out/pkgs" --out "$out/repo" --apt --pip --kpack-store -q \
  ${KPACK_STORE_CACHE:+--cache "$KPACK_STORE_CACHE"}
