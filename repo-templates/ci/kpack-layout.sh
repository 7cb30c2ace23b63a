#!/bin/sh
# Lays split artifact outputs out as install trees: the content of every
# stage prefix (artifact_manifest.txt) of <name>_<component>_<suffix>/ goes
# to SPLIT/<suffix>/ (generic -> SPLIT/generic/), which is what
# `rocm-kpack package` takes. Two artifacts never write the same path.
#
#   kpack-layout.sh ARTIFACT_OUTPUTS SPLIT
set -eu
[ $# -eq 2 ] || { echo "usage: kpack-layout.sh ARTIFACT_OUTPUTS SPLIT" >&2; exit 2; }
for dir in "$1"/*_*/; do
  dir=${dir%/}
  [ -f "$dir/artifact_manifest.txt" ] || continue
  suffix=${dir##*_}
  dest=$2/$suffix
  mkdir -p "$dest"
  while IFS= read -r prefix || [ -n "$prefix" ]; do
    if [ -z "$prefix" ] || [ ! -d "$dir/$prefix" ]; then continue; fi
    cp -a --no-clobber "$dir/$prefix/." "$dest/"
  done <"$dir/artifact_manifest.txt"
done
