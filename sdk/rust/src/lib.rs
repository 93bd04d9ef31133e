//! Wharf plugin SDK (placeholder).
