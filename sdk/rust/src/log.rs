//! Structured logging into the host's log (never the session log).
//!
//! ```rust,no_run
//! wharf_sdk::log::info!("indexed {} files", 3);
//! wharf_sdk::log::warn!("slow path");
//! ```
//!
//! The host caps message size and rate per call.

pub use crate::raw::wharf::plugin::log::Level;

/// Writes one log line at `level`.
pub fn write(level: Level, message: &str) {
    #[cfg(target_family = "wasm")]
    crate::raw::wharf::plugin::log::write(level, message);
    #[cfg(not(target_family = "wasm"))]
    crate::testing::log_write(level, message);
}

#[doc(inline)]
pub use crate::{
    __wharf_log_debug as debug, __wharf_log_error as error, __wharf_log_info as info, __wharf_log_trace as trace,
    __wharf_log_warn as warn,
};

#[doc(hidden)]
#[macro_export]
macro_rules! __wharf_log_trace {
    ($($arg:tt)+) => { $crate::log::write($crate::log::Level::Trace, &::std::format!($($arg)+)) };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __wharf_log_debug {
    ($($arg:tt)+) => { $crate::log::write($crate::log::Level::Debug, &::std::format!($($arg)+)) };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __wharf_log_info {
    ($($arg:tt)+) => { $crate::log::write($crate::log::Level::Info, &::std::format!($($arg)+)) };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __wharf_log_warn {
    ($($arg:tt)+) => { $crate::log::write($crate::log::Level::Warn, &::std::format!($($arg)+)) };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __wharf_log_error {
    ($($arg:tt)+) => { $crate::log::write($crate::log::Level::Error, &::std::format!($($arg)+)) };
}
