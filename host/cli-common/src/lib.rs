//! What the `wharf` command's surfaces share: the host flags turned into
//! [`wharf_harness::HostOptions`] ([`args`]), the environment variables the
//! libraries take as values ([`env`]), and how commands print, colour and
//! log ([`output`]).

pub mod args;
pub mod env;
pub mod output;

pub use args::{HostArgs, parse_max_steps};
