//! Tests: oci (issue 16/17; being written).
