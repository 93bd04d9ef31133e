//! Wharf runtime.
