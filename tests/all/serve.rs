//! Tests: serve (issue 16/17; being written).
