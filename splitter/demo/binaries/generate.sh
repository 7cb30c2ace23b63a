#!/bin/sh
# The demo's binaries are the test fixtures it shows, copied here so that the
# rocm-kpack-demo crate ships them from its own directory. They are built in one
# place, tests/fixtures/build.sh (from the sources in tests/fixtures/src and
# tests/fixtures/stub-hip, byte for byte reproducible); this script copies them.
#
#   splitter/demo/binaries/generate.sh          copy the fixtures here
#   splitter/demo/binaries/generate.sh --check  compare (exit 1 on a difference)
#
# The copies cost nothing in git (identical content is one blob), and
# tests/tests/suite/fixtures.rs fails when they drift from the fixtures.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
fixtures=$here/../../../tests/fixtures

check=0
if [ "${1:-}" = "--check" ]; then check=1; fi

# demo name    fixture (what the demo installs it as: see splitter/demo/src/lib.rs)
status=0
while read -r name fixture; do
  if [ $check = 1 ]; then
    if ! cmp -s "$fixtures/$fixture" "$here/$name"; then
      echo "differs: splitter/demo/binaries/$name (from tests/fixtures/$fixture)" >&2
      status=1
    fi
  else
    cp "$fixtures/$fixture" "$here/$name"
  fi
done <<'LIST'
kpack_demo_app clang19/app_pie
libmulti.so clang19/libmulti.so
libfixture.so clang19-compressed/libfixture.so
libamdhip64.so stub-hip/libamdhip64.so
LIST

if [ $check = 1 ]; then
  [ $status = 0 ] && echo "generate.sh: the demo's binaries equal the test fixtures"
  exit $status
fi
echo "generate.sh: the demo's binaries copied from tests/fixtures"
