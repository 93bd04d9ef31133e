//! One integration-test binary (saves link time), one module per area.

mod acp;
mod chat;
mod cli_plugin;
mod llm;
// The web UI and MCP end-to-end suites (tests/all/web.rs, tests/all/mcp.rs)
// were still being finished when this landed; they are not part of the
// CI run yet (issue 7 stays open).
mod plugins_langs;
mod policy;
mod reload;
mod run;
mod sandbox;
mod shell;
