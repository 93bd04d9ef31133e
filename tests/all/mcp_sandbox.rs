//! Tests: mcp_sandbox (issue 16/17; being written).
