//! rocm-kpack runtime: every on-disk format (reader and writer), the
//! code-object loader, and the `librocm_kpack` C ABI.
