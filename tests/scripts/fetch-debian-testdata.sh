#!/bin/sh
# Fetches, verifies and extracts the Debian ROCm packages used as real-world
# test data (same pins and layout as tests/support/src/debian.rs):
#
#   tests/scripts/fetch-debian-testdata.sh [PACKAGE...]
#
# Default packages: librocrand1 libamdhip64-5 (tests); add librocsparse0 for
# the benchmark (94 MB download, 1.3 GB extracted), librocsolver0 for the
# scaling benchmark (Debian 13 trixie, through a private apt configuration
# under <cache>/apt-trixie/; the machine's sources are not touched; 451 MB
# download, 1.6 GB extracted), librocblas0 for the kernel-database test and
# benchmark (trixie too; 166 MB download, 2.3 GB extracted), libhipfft0-tests
# for its fat executable (trixie; 1.1 MB). .debs already in
# $ROCM_KPACK_TESTDATA, /var/cache/rocm-kpack-debs or the cache directory are
# reused; others are fetched with `apt-get download`. Every .deb is checked
# against its pinned sha256 (a mismatch is an error, exit 1). The cache
# directory is $ROCM_KPACK_TESTDATA, else <workspace>/target/debian-cache;
# packages are extracted to <cache>/extracted/<name>_<version>/.
set -eu

root=$(cd "$(dirname "$0")/../.." && pwd)
cache=${ROCM_KPACK_TESTDATA:-$root/target/debian-cache}

pin() {
  case "$1" in
    librocrand1) echo "5.3.3-4 b145d4e47a26ce14da5f8550a092db8d3c7e2d84174c68885336de40f51b7b81" ;;
    librocsparse0) echo "5.3.0+dfsg-2 688878bb8cb9ec7970e7b632828d91336a6819860fb0c306372eb6a7199b3b8e" ;;
    libamdhip64-5) echo "5.2.3-8 e89c3757b6ca16b7a03374a0a42402ab19e9e7000251d47379838be965330ebd" ;;
    librocsolver0) echo "5.5.1-7 8b3763a18c7bebc244337432bbef5e1ff4ac4dcf56bba32e766b4070c3afaee0 trixie" ;;
    librocblas0) echo "5.5.1+dfsg-7 951dfa1a46ee275dace455f396640cfc63a47927455a0903b73c4e50030574c1 trixie" ;;
    libhipfft0-tests) echo "6.1.2-3 76a01cbe5c5b588548cb37ec1747eacc2f58acfa4af95f89cf3aee37e12a9302 trixie" ;;
    *) echo "fetch-debian-testdata: $1 is not a pinned package" >&2; exit 2 ;;
  esac
}

# apt options of the private trixie configuration (same as debian.rs),
# updated on first use.
trixie_apt() {
  a=$cache/apt-trixie
  set -- -o Dir::Etc::SourceList="$a/etc/sources.list" -o Dir::Etc::SourceParts=/nonexistent \
    -o Dir::State="$a" -o Dir::State::Lists="$a/lists" -o Dir::State::status="$a/status" \
    -o Dir::Cache="$a" -o Dir::Cache::archives="$a/archives"
  if ! ls "$a/lists/"*_InRelease >/dev/null 2>&1; then
    mkdir -p "$a/etc" "$a/lists/partial" "$a/archives/partial"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" >"$a/etc/sources.list"
    [ -e "$a/status" ] || : >"$a/status"
    apt-get "$@" -q update >&2
  fi
  printf '%s\n' "$@"
}

verify() { # file sha256
  actual=$(sha256sum "$1" | cut -d' ' -f1)
  if [ "$actual" != "$2" ]; then
    echo "fetch-debian-testdata: $1: sha256 $actual, expected $2" >&2
    exit 1
  fi
}

[ $# -gt 0 ] || set -- librocrand1 librocsparse0 libamdhip64-5
mkdir -p "$cache"
for name in "$@"; do
  p=$(pin "$name") || exit 2
  version=$(echo "$p" | cut -d' ' -f1) sum=$(echo "$p" | cut -d' ' -f2)
  suite=$(echo "$p" | cut -s -d' ' -f3)
  file=${name}_${version}_amd64.deb
  deb=
  for dir in ${ROCM_KPACK_TESTDATA:+"$ROCM_KPACK_TESTDATA"} /var/cache/rocm-kpack-debs "$cache"; do
    if [ -f "$dir/$file" ]; then deb=$dir/$file; break; fi
  done
  if [ -z "$deb" ]; then
    tmp=$(mktemp -d "$cache/.download-XXXXXX")
    if [ "$suite" = trixie ]; then
      opts=$(trixie_apt)
      # One option per line: split on newlines only.
      (cd "$tmp" && IFS='
' && apt-get $opts download "$name=$version")
    else
      (cd "$tmp" && apt-get download "$name=$version")
    fi
    verify "$tmp/$file" "$sum"
    mv "$tmp/$file" "$cache/$file"
    rmdir "$tmp"
    deb=$cache/$file
  fi
  verify "$deb" "$sum"
  dest=$cache/extracted/${name}_${version}
  if [ ! -d "$dest" ]; then
    mkdir -p "$cache/extracted"
    tmp=$(mktemp -d "$cache/extracted/.$name-XXXXXX")
    dpkg-deb -x "$deb" "$tmp"
    mv -T "$tmp" "$dest" 2>/dev/null || rm -rf "$tmp"
  fi
  echo "$name $version: $deb -> $dest"
done
