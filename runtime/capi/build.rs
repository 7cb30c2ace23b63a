//! Link setup for the `librocm_kpack` cdylib: the SONAME the reference
//! library uses and a version script that exports only `kpack_*`.

fn main() {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let map = std::path::Path::new(&manifest_dir).join("exports.map");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={}", map.display());
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os == "linux" {
        // Consumers record this name (DT_NEEDED), so it must match the
        // reference library's: librocm_kpack.so.0.
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librocm_kpack.so.0");
        println!(
            "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
            map.display()
        );
    }
}
