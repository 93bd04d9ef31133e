//! Tests: store_pg (issue 16/17; being written).
