#!/usr/bin/env bash
# Runs the workspace's tests (what `cargo test --workspace` runs) as one
# `cargo test` per target, several at a time, and prints each target's
# output whole when it ends. Called by scripts/test.sh after the build.
#
# The end-to-end tests are one test binary, `suite` (tests/tests/suite/main.rs,
# one module per subject): it links once, and runs here once per module,
# as a filter (`cargo test --test suite -- install_flows::`), so its
# modules still run side by side.
#
# Why not one `cargo test`: it runs its test binaries one after another,
# and the slow ones mostly wait on other programs (mmdebstrap, apt and dnf in
# a chroot, valgrind, cargo install, dpkg-deb, Wine), so the machine idles.
# Why not cargo-nextest: it runs every test in a process of its own, and
# many tests share expensive set-up through a static in their module
# (tests/tests/suite/install_flows.rs: the split packages and the stripped
# fetcher; runtime/capi/tests/capi_programs.rs: the compiled C programs;
# tests/support/src/bins.rs: one `cargo build` per process), which would then
# be redone per test. One process per module keeps that sharing.
#
# install_flows, the longest by far (its chroot tests run one at a time,
# each copying a 400 MB Debian root), runs as two processes: its dnf tests
# (`install_flows_dnf`) and the rest. Each redoes the module's cheap
# shared set-up (split-package of librocrand, a stripped fetcher); the
# cached Debian root is built once, under a lock the two share.
#
#   parallel-tests.sh [TARGET...]
#
# TARGET: a module of the `suite` binary (`install_flows`, or the shard
# `install_flows_dnf`), another integration test target (`capi_programs`),
# `unit` (lib and bin unit tests of every crate), `doc` (doctests) or
# `windows` (tests/scripts/windows-tests.sh); default every one of them.
# Environment: KPACK_TEST_JOBS (targets at a time, default: cores + 1),
# KPACK_TEST_LOGS (directory of the per-target logs, default
# target/test-logs). Exits 1 when any target fails; every target runs.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

jobs=${KPACK_TEST_JOBS:-$(($(nproc) + 1))}
logs=${KPACK_TEST_LOGS:-$root/target/test-logs}
rm -rf "$logs"
mkdir -p "$logs"

# Slowest first (seconds each took on CI, 2 cores, beside the others), so
# that the long ones overlap the many short ones instead of running last and
# alone.
slow=(install_flows install_flows_dnf split_package readme capi_programs
  rocblas_databases release_ci hostile_rpm windows_split package_formats unit
  windows pip_native via_package_managers cli_progress fetch amd_native
  cli_conformance split_binary fetch_e2e)

# The suite's modules, and the libtest arguments of each module's process.
declare -A suite_args=()
while read -r module; do
  suite_args[$module]="$module::"
done < <(sed -n 's/^mod \([a-z0-9_]*\);$/\1/p' tests/tests/suite/main.rs)
[ "${#suite_args[@]}" -gt 0 ] || { echo "parallel-tests: no modules in tests/tests/suite/main.rs" >&2; exit 2; }
# Each dnf test, in install_flows and its submodules, in a process of its own.
dnf=(install_flows::dnf_ install_flows::amd_native_packages::dnf_)
suite_args[install_flows]="install_flows:: ${dnf[*]/#/--skip }"
suite_args[install_flows_dnf]="${dnf[*]}"

if [ $# -gt 0 ]; then
  targets=("$@")
else
  mapfile -t tests < <(cargo metadata --no-deps --format-version 1 | python3 -c '
import json, sys
for p in json.load(sys.stdin)["packages"]:
    for t in p["targets"]:
        if "test" in t["kind"] and t["name"] != "suite":
            print(t["name"])
')
  # A failing `cargo metadata` must not shrink the run to nothing.
  [ "${#tests[@]}" -gt 0 ] || { echo "parallel-tests: no test targets found" >&2; exit 2; }
  # A module named like another crate's test target would hide it.
  for t in "${tests[@]}"; do
    [ -z "${suite_args[$t]:-}" ] || { echo "parallel-tests: suite module $t is also a test target" >&2; exit 2; }
  done
  tests+=("${!suite_args[@]}")
  targets=()
  for t in "${slow[@]}"; do
    case " ${tests[*]} unit doc windows " in *" $t "*) targets+=("$t") ;; esac
  done
  for t in $(printf '%s\n' "${tests[@]}" doc | sort); do
    case " ${targets[*]} " in *" $t "*) ;; *) targets+=("$t") ;; esac
  done
fi

stamp() {
  local line
  while IFS= read -r line; do
    case "$line" in
      "test "*) printf '[%5d s] %s\n' "$((SECONDS - $1))" "$line" ;;
      *) printf '%s\n' "$line" ;;
    esac
  done
}

run_target() {
  local name=$1 start=$SECONDS rc=0
  local cmd=(cargo test --workspace --no-fail-fast)
  case "$name" in
    unit) cmd+=(--lib --bins) ;;
    doc) cmd+=(--doc) ;;
    # Under Wine the C ABI fuzz test (runtime/capi/src/tests.rs) runs at
    # its own default count: its point there is Windows' handling of mapped
    # files between iterations, while the parsers behind it are the same
    # code the Linux run fuzzes KPACK_FUZZ_ITERS times. Wine runs it about
    # half as fast, so 20000 iterations took 98 s of the Wine run.
    windows) cmd=(env "KPACK_FUZZ_ITERS=${KPACK_WINE_FUZZ_ITERS:-3000}"
      bash tests/scripts/windows-tests.sh --no-fail-fast) ;;
    *)
      if [ -n "${suite_args[$name]:-}" ]; then
        # shellcheck disable=SC2206 # the filters are words
        cmd+=(--test suite -- ${suite_args[$name]})
      else
        cmd+=(--test "$name")
      fi ;;
  esac
  # libtest prints no test's duration: each result line gets the seconds
  # since its target started, which tells where a target's time goes.
  # CPU seconds (user + system, the target's processes and their children)
  # tell what each target costs the shared cores, which its wall time
  # beside the others does not.
  local timed=()
  [ ! -x /usr/bin/time ] || timed=(/usr/bin/time -o "$logs/$name.cpu" -f '%U %S')
  "${timed[@]}" "${cmd[@]}" 2>&1 </dev/null | stamp "$start" >"$logs/$name.log" || rc=$?
  local cpu=-
  [ ! -s "$logs/$name.cpu" ] || cpu=$(awk 'END { printf "%.0f", $1 + $2 }' "$logs/$name.cpu")
  echo "$rc $((SECONDS - start)) $cpu" >"$logs/$name.status"
  # One target's output at a time.
  # shellcheck disable=SC2016 # the arguments expand in the inner shell
  flock "$logs/.print" sh -c 'echo "=== $1 (exit $2, $3 s)"; cat "$4"' \
    sh "$name" "$rc" "$((SECONDS - start))" "$logs/$name.log"
}

for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
    wait -n || true
  done
  run_target "$t" &
done
wait

status=0
echo "=== summary (target, seconds, CPU seconds, exit status)"
for t in "${targets[@]}"; do
  read -r rc secs cpu <"$logs/$t.status" || { rc=missing secs=- cpu=-; }
  printf '%-28s %6s %6s  %s\n' "$t" "$secs" "$cpu" "$rc"
  [ "$rc" = 0 ] || status=1
done
exit "$status"
