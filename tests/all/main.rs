//! One integration-test binary (saves link time), one module per area.

mod cli_plugin;
mod policy;
mod reload;
mod run;
mod sandbox;
mod shell;
