//! One integration-test binary (saves link time), one module per area.

mod acp;
mod anthropic;
mod bounds;
mod capabilities;
mod chat;
mod cli_edges;
mod cli_plugin;
mod faults;
mod fresh_machine;
mod hardening_fs;
mod install;
mod llm;
mod mcp;
mod permissions;
mod plugins_langs;
mod policy;
mod project_context;
mod reload;
mod run;
mod sandbox;
mod shell;
mod system_prompt;
mod todo_skills;
mod tool_names;
mod web;
mod web_fetch;
