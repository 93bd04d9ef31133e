//! Tests: mcp_http (issue 16/17; being written).
