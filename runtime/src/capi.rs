//! TODO(owner): C ABI
