#!/bin/sh
# Install the rocm-kpack C runtime into a prefix:
#
#   runtime/install-runtime.sh --prefix /opt/rocm
#
# builds (cargo, release profile) and lays out
#   lib/librocm_kpack.so.<version>, lib/librocm_kpack.so.0, lib/librocm_kpack.so
#   lib/librocm_kpack.a
#   lib/librocm_kpack_preload.so          (LD_PRELOAD shim for stock HIP runtimes)
#   include/rocm_kpack/kpack.h, kpack_types.h, kpack_export.h
#   lib/cmake/rocm-kpack/rocm-kpack-config.cmake (+ -config-version.cmake)
#   lib/pkgconfig/rocm-kpack.pc
#
# Options:
#   --prefix DIR       install prefix (required)
#   --profile NAME     cargo profile to build and install (default: release)
#   --no-build         install what `cargo build` already produced for the profile
#   --destdir DIR      stage under DIR (packaging); paths inside files keep --prefix
set -eu

usage() {
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
    exit "${1:-0}"
}

prefix=""
profile="release"
build=1
destdir=""
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) [ $# -ge 2 ] || usage 2; prefix="$2"; shift 2 ;;
        --prefix=*) prefix="${1#--prefix=}"; shift ;;
        --profile) [ $# -ge 2 ] || usage 2; profile="$2"; shift 2 ;;
        --profile=*) profile="${1#--profile=}"; shift ;;
        --destdir) [ $# -ge 2 ] || usage 2; destdir="$2"; shift 2 ;;
        --destdir=*) destdir="${1#--destdir=}"; shift ;;
        --no-build) build=0; shift ;;
        -h|--help) usage 0 ;;
        *) echo "install-runtime.sh: unknown argument: $1" >&2; usage 2 ;;
    esac
done
[ -n "$prefix" ] || { echo "install-runtime.sh: --prefix is required" >&2; usage 2; }
case "$prefix" in
    /*) ;;
    *) prefix="$(pwd)/$prefix" ;;
esac

here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

if [ "$build" = 1 ]; then
    cargo build --profile "$profile" -p rocm-kpack-capi -p rocm-kpack-preload
fi

version="$(cargo pkgid -p rocm-kpack-capi)"
version="${version##*@}"
version="${version##*#}"
target_dir="$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
case "$profile" in
    dev|test) out="$target_dir/debug" ;;
    *) out="$target_dir/$profile" ;;
esac
for f in librocm_kpack.so librocm_kpack.a librocm_kpack_preload.so; do
    [ -f "$out/$f" ] || { echo "install-runtime.sh: $out/$f missing (build first or drop --no-build)" >&2; exit 1; }
done

root="$destdir$prefix"
lib="$root/lib"
mkdir -p "$lib/cmake/rocm-kpack" "$lib/pkgconfig" "$root/include/rocm_kpack"

install -m 0755 "$out/librocm_kpack.so" "$lib/librocm_kpack.so.$version"
ln -sfn "librocm_kpack.so.$version" "$lib/librocm_kpack.so.0"
ln -sfn "librocm_kpack.so.0" "$lib/librocm_kpack.so"
install -m 0644 "$out/librocm_kpack.a" "$lib/librocm_kpack.a"
install -m 0755 "$out/librocm_kpack_preload.so" "$lib/librocm_kpack_preload.so"
for h in capi/include/rocm_kpack/*.h; do
    install -m 0644 "$h" "$root/include/rocm_kpack/"
done

# Substitute @PREFIX@ / @VERSION@; escape sed's special characters in values.
esc() { printf '%s' "$1" | sed 's/[\\|&]/\\&/g'; }
subst() {
    sed -e "s|@PREFIX@|$(esc "$prefix")|g" -e "s|@VERSION@|$(esc "$version")|g" "$1" > "$2.tmp"
    mv "$2.tmp" "$2"
    chmod 0644 "$2"
}
subst capi/cmake/rocm-kpack-config.cmake.in "$lib/cmake/rocm-kpack/rocm-kpack-config.cmake"
subst capi/cmake/rocm-kpack-config-version.cmake.in "$lib/cmake/rocm-kpack/rocm-kpack-config-version.cmake"
subst capi/pkgconfig/rocm-kpack.pc.in "$lib/pkgconfig/rocm-kpack.pc"

echo "installed rocm-kpack $version runtime into $root"
