//! One integration-test binary (saves link time).
