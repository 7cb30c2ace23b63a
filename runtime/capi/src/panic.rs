//! The panic boundary every exported function runs in.

use std::panic::{catch_unwind, AssertUnwindSafe};

use rocm_kpack_format::ErrorCode;

/// Code reported when a panic is caught. Panics are bugs reached through
/// some input this library failed to handle, so the caller is told the input
/// was not understood.
pub const PANIC_CODE: ErrorCode = ErrorCode::InvalidFormat;

/// Run `body`, turning its `Err` and any panic into an error code.
pub fn boundary(body: impl FnOnce() -> Result<(), ErrorCode>) -> ErrorCode {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => ErrorCode::Success,
        Ok(Err(code)) => code,
        Err(_) => PANIC_CODE,
    }
}

/// [`boundary`] for functions without a result (close, free, destroy).
pub fn boundary_void(body: impl FnOnce()) {
    // Nothing can be reported from a void function; swallowing the panic is
    // still better than unwinding into C (undefined behaviour).
    let _ = catch_unwind(AssertUnwindSafe(body));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_become_codes() {
        assert_eq!(boundary(|| Ok(())), ErrorCode::Success);
        assert_eq!(
            boundary(|| Err(ErrorCode::KernelNotFound)),
            ErrorCode::KernelNotFound
        );
        assert_eq!(boundary(|| panic!("boom")), PANIC_CODE);
        boundary_void(|| panic!("boom"));
    }
}
