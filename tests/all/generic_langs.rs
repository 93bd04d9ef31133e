//! Tests: generic_langs (issue 16/17; being written).
