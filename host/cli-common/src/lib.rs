//! What the `wharf` command's surfaces share: the host flags and the
//! environment turned into [`wharf_harness::HostOptions`] ([`args`]), and
//! how commands print, colour and log ([`output`]).

pub mod args;
pub mod env;
pub mod output;

pub use args::{HostArgs, parse_max_steps};
