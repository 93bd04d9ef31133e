//! Tests: generic_components (issue 16/17; being written).
