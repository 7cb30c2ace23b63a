//! Link setup for `librocm_kpack_preload.so`: export only the two
//! interposed HIP entry points.

fn main() {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let map = std::path::Path::new(&manifest_dir).join("exports.map");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={}", map.display());
    if std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default() == "linux" {
        println!(
            "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
            map.display()
        );
        // rustc's own version script lists every `#[no_mangle]` function of
        // the rocm-kpack rlib (the kpack_* C ABI) as global, which a second
        // script cannot take back; hiding all symbols that come from
        // archives (rlibs) keeps them internal to the shim.
        println!("cargo:rustc-cdylib-link-arg=-Wl,--exclude-libs,ALL");
    }
}
