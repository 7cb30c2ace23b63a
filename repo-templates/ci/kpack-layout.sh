#!/bin/sh
# Lays split artifact outputs out as install trees: the content of every
# stage prefix (artifact_manifest.txt) of <name>_<component>_<suffix>/ goes
# to SPLIT/<suffix>/ (generic -> SPLIT/generic/), which is what
# `rocm-kpack package` takes. Two artifacts never write the same path.
#
# A build shard's manifest is input like any other: each prefix must be a
# relative path of plain components (no `..`, no `.`, no leading `/`, no
# control characters), and must stay inside its artifact once symlinks are
# resolved; anything else stops the layout with the file, line and why.
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
  real_dir=$(realpath -e -- "$dir")
  line=0
  while IFS= read -r prefix || [ -n "$prefix" ]; do
    line=$((line + 1))
    [ -n "$prefix" ] || continue
    bad=
    case $prefix in
      /*) bad="an absolute path" ;;
      ..|../*|*/..|*/../*) bad="a .. component" ;;
      .|./*|*/.|*/./*) bad="a . component" ;;
      *//*) bad="an empty component" ;;
    esac
    if [ -z "$bad" ] && printf '%s' "$prefix" | LC_ALL=C grep -q '[[:cntrl:]]'; then
      bad="a control character"
    fi
    if [ -z "$bad" ] && [ -e "$dir/$prefix" ]; then
      real=$(realpath -e -- "$dir/$prefix")
      case $real in
        "$real_dir"/*) ;;
        *) bad="a path that leaves the artifact through a symlink ($real)" ;;
      esac
    fi
    if [ -n "$bad" ]; then
      echo "kpack-layout.sh: $dir/artifact_manifest.txt:$line: refusing prefix '$prefix': $bad (expected a relative path inside the artifact)" >&2
      exit 1
    fi
    [ -d "$dir/$prefix" ] || continue
    cp -a --no-clobber "$dir/$prefix/." "$dest/"
  done <"$dir/artifact_manifest.txt"
done
