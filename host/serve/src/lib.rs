//! The HTTP API of a multi-session Wharf host, used by `wharf serve` and `wharf web`.
