//! TODO(owner): loader
