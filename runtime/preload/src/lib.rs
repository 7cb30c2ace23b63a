//! LD_PRELOAD shim for split binaries on stock HIP runtimes.
//!
//! A HIP runtime that predates kpack rejects fat-binary wrappers whose magic
//! is HIPK. Loaded with `LD_PRELOAD=librocm_kpack_preload.so` (or linked
//! ahead of libamdhip64), this library interposes `__hipRegisterFatBinary`:
//!
//! - HIPF wrappers go to the real function untouched.
//! - For a HIPK wrapper it finds the host binary from the address of the
//!   marker the wrapper points at (`/proc/self/maps`), reads the marker, takes
//!   `co_index` from `reserved1`, finds the local GPU targets
//!   (`ROCM_KPACK_ARCH_OVERRIDE` as given, else KFD sysfs detection with the
//!   process's xnack mode added the way the HIP runtime names the device
//!   ISA: `gfx90a:sramecc+` runs as `gfx90a:sramecc+:xnack-` unless
//!   `HSA_XNACK=1`), loads one code object per target through the loader
//!   (native target first, then its generic ISA), builds an
//!   uncompressed offload bundle (host entry + one `hipv4-` entry per code
//!   object) and registers a HIPF wrapper pointing at it with the real
//!   `__hipRegisterFatBinary` (`dlsym(RTLD_NEXT)`). Bundle and wrapper live
//!   until `__hipUnregisterFatBinary` for the returned handle.
//! - When nothing can be loaded it prints one line to stderr naming the
//!   binary, the targets and the paths searched, then registers the original
//!   wrapper, so the HIP runtime reports its own error too (the program fails
//!   the way it would without the shim, with the reason printed first).
//!
//! `ROCM_KPACK_DEBUG` (truthy) also prints what was registered. The loader
//! environment (`ROCM_KPACK_PATH`, `..._PREFIX`, `..._DISABLE`) applies.
//! `ROCM_KPACK_SYSFS_ROOT` (for tests) makes detection read sysfs below that
//! directory instead of `/`.

use std::alloc::Layout;
use std::collections::HashMap;
use std::ffi::{c_void, CStr};
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use rocm_kpack_format::bundle::{write_bundle, HIP_BUNDLE_ALIGN};
use rocm_kpack_format::marker::Marker;
use rocm_kpack_format::target::TargetId;
use rocm_kpack_format::wrapper::{HIPF_MAGIC, HIPK_MAGIC, WRAPPER_VERSION};
use rocm_kpack_loader::loader::{self, Cache, LoaderConfig};

/// Host entry of the bundles we build (what clang 19 emits).
pub const HOST_TRIPLE: &str = "host-x86_64-unknown-linux--";
/// Prefix of device entries.
pub const DEVICE_TRIPLE_PREFIX: &str = "hipv4-amdgcn-amd-amdhsa--";

/// The in-memory `__CudaFatBinaryWrapper`.
#[repr(C)]
struct Wrapper {
    magic: u32,
    version: u32,
    binary: *const c_void,
    reserved1: u64,
}

type RegisterFn = unsafe extern "C" fn(*const c_void) -> *mut *mut c_void;
type UnregisterFn = unsafe extern "C" fn(*mut *mut c_void);

/// A bundle we built, 4096-aligned like the `.hip_fatbin` section clang
/// emits (code objects inside are aligned relative to its start).
struct AlignedBytes {
    ptr: *mut u8,
    layout: Layout,
}

// SAFETY: the allocation is exclusively owned; the raw pointer is only
// shared with the HIP runtime, which reads it.
unsafe impl Send for AlignedBytes {}

impl AlignedBytes {
    fn copy_of(bytes: &[u8]) -> Option<Self> {
        let layout = Layout::from_size_align(bytes.len().max(1), HIP_BUNDLE_ALIGN as usize).ok()?;
        // SAFETY: non-zero size.
        let ptr = unsafe { std::alloc::alloc(layout) };
        if ptr.is_null() {
            return None;
        }
        // SAFETY: ptr holds at least bytes.len() bytes; no overlap.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr, bytes.len()) };
        Some(AlignedBytes { ptr, layout })
    }
}

impl Drop for AlignedBytes {
    fn drop(&mut self) {
        // SAFETY: allocated in copy_of with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

/// What a registration built: freed at unregistration.
struct Registration {
    _bundle: AlignedBytes,
    _wrapper: Box<Wrapper>,
}

// SAFETY: Wrapper's raw pointer points into the owned bundle.
unsafe impl Send for Registration {}

/// Registrations by the handle the real runtime returned.
fn registry() -> &'static Mutex<HashMap<usize, Registration>> {
    static REGISTRY: OnceLock<Mutex<HashMap<usize, Registration>>> = OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(HashMap::new()))
}

/// One loader cache for the process, so archives are opened once.
fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(|| {
        // The shim asks per target itself; the override already chose the
        // targets, so the cache must not replace each request's list.
        Cache::with_config(LoaderConfig {
            arch_override: None,
            ..LoaderConfig::from_env()
        })
    })
}

/// The targets to load for, found once per process: the override's list as
/// given, else the detected GPUs' ISAs as the HIP runtime names them in
/// this process (with its xnack mode, from `HSA_XNACK`).
fn local_targets() -> Result<&'static [String], String> {
    static TARGETS: OnceLock<Result<Vec<String>, String>> = OnceLock::new();
    TARGETS
        .get_or_init(|| rocm_kpack_loader::detect::local_process_isas().map_err(|e| e.to_string()))
        .as_deref()
        .map_err(Clone::clone)
}

fn debug_enabled() -> bool {
    cache().config().debug
}

/// Address of the real HIP entry point `name`, skipping this library's own
/// definition (`own`). `dlsym(RTLD_NEXT)` finds it when libamdhip64 is in the
/// global scope; when the HIP runtime was loaded into a local scope (a
/// library dlopen'ed with RTLD_LOCAL, as Python extension modules are), every
/// loaded object's dependency tree is searched instead.
fn resolve_real(name: &CStr, own: *mut c_void) -> Option<*mut c_void> {
    // SAFETY: dlsym with a NUL-terminated name.
    let next = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    if !next.is_null() && next != own {
        return Some(next);
    }
    let mut objects = loaded_objects();
    // The HIP runtime itself first; then anything whose dependencies hold it.
    objects.sort_by_key(|o| !o.to_bytes().windows(8).any(|w| w == b"amdhip64"));
    objects.into_iter().find_map(|object| {
        // SAFETY: RTLD_NOLOAD only returns a handle to an object already
        // loaded (taking a reference, released by dlclose below).
        let handle = unsafe { libc::dlopen(object.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
        if handle.is_null() {
            return None;
        }
        // SAFETY: valid handle and name.
        let sym = unsafe { libc::dlsym(handle, name.as_ptr()) };
        // SAFETY: balances the reference taken by dlopen.
        unsafe { libc::dlclose(handle) };
        (!sym.is_null() && sym != own).then_some(sym)
    })
}

/// Paths of every object loaded in the process (main program excluded).
fn loaded_objects() -> Vec<std::ffi::CString> {
    unsafe extern "C" fn collect(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> libc::c_int {
        // SAFETY: dl_iterate_phdr passes a valid info; data is our Vec.
        unsafe {
            let names = &mut *data.cast::<Vec<std::ffi::CString>>();
            let name = (*info).dlpi_name;
            if !name.is_null() && *name != 0 {
                names.push(CStr::from_ptr(name).to_owned());
            }
        }
        0
    }
    let mut names: Vec<std::ffi::CString> = Vec::new();
    // SAFETY: the callback only appends to `names`, which outlives the call.
    unsafe {
        libc::dl_iterate_phdr(
            Some(collect),
            (&mut names as *mut Vec<std::ffi::CString>).cast(),
        )
    };
    names
}

/// The real `__hipRegisterFatBinary`, cached once found (not while missing,
/// so a runtime loaded later is still found).
fn real_register() -> Option<RegisterFn> {
    static REAL: OnceLock<RegisterFn> = OnceLock::new();
    if let Some(f) = REAL.get() {
        return Some(*f);
    }
    let own = __hipRegisterFatBinary as RegisterFn as *mut c_void;
    let sym = resolve_real(c"__hipRegisterFatBinary", own)?;
    // SAFETY: the symbol is the HIP runtime's __hipRegisterFatBinary.
    let f = unsafe { std::mem::transmute::<*mut c_void, RegisterFn>(sym) };
    Some(*REAL.get_or_init(|| f))
}

/// The real `__hipUnregisterFatBinary` (see [`real_register`]).
fn real_unregister() -> Option<UnregisterFn> {
    static REAL: OnceLock<UnregisterFn> = OnceLock::new();
    if let Some(f) = REAL.get() {
        return Some(*f);
    }
    let own = __hipUnregisterFatBinary as UnregisterFn as *mut c_void;
    let sym = resolve_real(c"__hipUnregisterFatBinary", own)?;
    // SAFETY: the symbol is the HIP runtime's __hipUnregisterFatBinary.
    let f = unsafe { std::mem::transmute::<*mut c_void, UnregisterFn>(sym) };
    Some(*REAL.get_or_init(|| f))
}

/// Interposed `__hipRegisterFatBinary`.
///
/// # Safety
/// `data` is what the compiler-generated constructor passes: a pointer to a
/// fat-binary wrapper.
#[no_mangle]
pub unsafe extern "C" fn __hipRegisterFatBinary(data: *const c_void) -> *mut *mut c_void {
    let Some(real) = real_register() else {
        eprintln!("rocm-kpack preload: the HIP runtime's __hipRegisterFatBinary was not found (is libamdhip64 loaded?)");
        return std::ptr::null_mut();
    };
    // Never unwind into the compiler's constructor: on a panic, behave as if
    // the shim were absent.
    let replacement = std::panic::catch_unwind(|| {
        // SAFETY: forwarded caller contract.
        unsafe { replacement_for(data) }
    })
    .unwrap_or(None);
    match replacement {
        Some(reg) => {
            let wrapper: *const Wrapper = &*reg._wrapper;
            // SAFETY: a valid HIPF wrapper pointing at a valid bundle, both
            // kept alive in the registry until unregistration.
            let handle = unsafe { real(wrapper.cast()) };
            if let Ok(mut map) = registry().lock() {
                map.insert(handle as usize, reg);
            } else {
                // Poisoned lock: keep the registration alive forever rather
                // than free memory the runtime uses.
                std::mem::forget(reg);
            }
            handle
        }
        // SAFETY: the original wrapper, as the compiler passed it.
        None => unsafe { real(data) },
    }
}

/// Interposed `__hipUnregisterFatBinary`: unregister, then free what the
/// matching registration built.
///
/// # Safety
/// `modules` is a handle returned by `__hipRegisterFatBinary`.
#[no_mangle]
pub unsafe extern "C" fn __hipUnregisterFatBinary(modules: *mut *mut c_void) {
    if let Some(real) = real_unregister() {
        // SAFETY: forwarded caller contract.
        unsafe { real(modules) };
    }
    let freed = registry()
        .lock()
        .ok()
        .and_then(|mut m| m.remove(&(modules as usize)));
    drop(freed);
}

/// The HIPF registration replacing a HIPK wrapper, or `None` to pass `data`
/// through (HIPF, unknown magic, or nothing loadable).
///
/// # Safety
/// `data` is NULL or points at a readable 24-byte wrapper.
unsafe fn replacement_for(data: *const c_void) -> Option<Registration> {
    if data.is_null() {
        return None;
    }
    // SAFETY: caller contract; read unaligned to make no assumption.
    let wrapper = unsafe { data.cast::<Wrapper>().read_unaligned() };
    if wrapper.magic != HIPK_MAGIC {
        return None;
    }
    let co_index = wrapper.reserved1 as u32;
    // The marker lives in the binary that carries it (.rocm_kpack_ref), so
    // its address names that binary, wherever the wrapper itself is.
    let binary = match loader::discover_binary_path(wrapper.binary as usize) {
        Ok(found) => found.path,
        Err(e) => {
            eprintln!(
                "rocm-kpack preload: cannot find the binary holding kpack marker {:p}: {e}",
                wrapper.binary
            );
            return None;
        }
    };
    // SAFETY: a HIPK wrapper's binary points at the marker in the same
    // mapped file.
    let marker = match unsafe { loader::marker_from_ptr(wrapper.binary.cast()) } {
        Ok(m) => m,
        Err(e) => {
            eprintln!(
                "rocm-kpack preload: {}: unreadable kpack marker: {e}",
                binary.display()
            );
            return None;
        }
    };
    let targets = match local_targets() {
        Ok(t) if !t.is_empty() => t,
        Ok(_) => {
            eprintln!(
                "rocm-kpack preload: {}: no AMD GPU detected (set ROCM_KPACK_ARCH_OVERRIDE to choose targets)",
                binary.display()
            );
            return None;
        }
        Err(e) => {
            eprintln!(
                "rocm-kpack preload: {}: GPU detection failed: {e}",
                binary.display()
            );
            return None;
        }
    };
    let objects = load_for_targets(&marker, &binary, co_index, targets);
    if objects.is_empty() {
        return None;
    }
    let entries: Vec<(String, &[u8])> = std::iter::once((HOST_TRIPLE.to_owned(), &[][..]))
        .chain(
            objects
                .iter()
                .map(|(arch, data)| (format!("{DEVICE_TRIPLE_PREFIX}{arch}"), data.as_slice())),
        )
        .collect();
    let refs: Vec<(&str, &[u8])> = entries.iter().map(|(t, d)| (t.as_str(), *d)).collect();
    let bundle = AlignedBytes::copy_of(&write_bundle(&refs))?;
    if debug_enabled() {
        let arches: Vec<&str> = objects.iter().map(|(a, _)| a.as_str()).collect();
        eprintln!(
            "rocm-kpack preload: {} co_index {co_index}: registering [{}]",
            binary.display(),
            arches.join(", ")
        );
    }
    let hipf = Box::new(Wrapper {
        magic: HIPF_MAGIC,
        version: WRAPPER_VERSION,
        binary: bundle.ptr.cast_const().cast(),
        reserved1: 0,
    });
    Some(Registration {
        _bundle: bundle,
        _wrapper: hipf,
    })
}

/// One code object per target (native, else its generic family), as
/// (arch key, bytes), without repeats. Failures are reported once, after all
/// targets were tried, if nothing at all could be loaded.
fn load_for_targets(
    marker: &Marker,
    binary: &Path,
    co_index: u32,
    targets: &[String],
) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    let mut failures: Vec<(String, rocm_kpack_format::Error)> = Vec::new();
    for target in targets {
        let mut arch_list = vec![target.clone()];
        let fallback = TargetId::parse(target)
            .ok()
            .and_then(|id| id.generic_fallback());
        arch_list.extend(fallback.map(|g| g.to_string()));
        match cache().load_code_object(marker, binary, co_index, &arch_list) {
            Ok(co) => {
                if !out.iter().any(|(a, _)| *a == co.arch) {
                    out.push((co.arch, co.data));
                }
            }
            Err(e) => failures.push((target.clone(), e)),
        }
    }
    if out.is_empty() {
        report_failure(binary, co_index, &failures);
    } else if debug_enabled() {
        for (target, e) in &failures {
            eprintln!(
                "rocm-kpack preload: {}: no code object for {target}: {e}",
                binary.display()
            );
        }
    }
    out
}

fn report_failure(binary: &Path, co_index: u32, failures: &[(String, rocm_kpack_format::Error)]) {
    let targets: Vec<&str> = failures.iter().map(|(t, _)| t.as_str()).collect();
    let mut reasons: Vec<String> = Vec::new();
    for (_, e) in failures {
        let text = match e {
            rocm_kpack_format::Error::ArchiveNotFound { searched } => {
                format!("no archive found: searched {}", searched.join(", "))
            }
            other => other.to_string(),
        };
        if !reasons.contains(&text) {
            reasons.push(text);
        }
    }
    eprintln!(
        "rocm-kpack preload: no device code for {} in {} (code object {co_index}): {}",
        targets.join(", "),
        binary.display(),
        reasons.join("; ")
    );
}
