//! Outbound network checks (destination addresses).
