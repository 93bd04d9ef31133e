//! `wharf plugin …`: inspect, check and call components directly.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::json;
use wharf_core::plugin::{AgentOutcome, AgentTask, BoxFuture, CompleteRequest, ServiceError, SessionServices};
use wharf_runtime::grants::{DirGrant, Grant};
use wharf_runtime::{CallContext, PluginSpec, PluginVersion, Runtime, RuntimeOptions};

/// Plugin subcommands.
#[derive(Subcommand)]
pub enum PluginCommand {
    /// Show a component's kinds, tools (mode and schema), requested grants
    /// and WIT package version.
    Inspect {
        /// The component file.
        file: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Validate a component without running a tool: header, WIT version,
    /// world, imports, self-description.
    Check {
        /// The component file.
        file: PathBuf,
    },
    /// Call one tool in a fresh sandbox and print the result as JSON
    /// `{"content", "is_error", "error_code"}`.
    Call(CallArgs),
}

/// Arguments of `wharf plugin call`.
#[derive(Args)]
pub struct CallArgs {
    /// The component file.
    file: PathBuf,
    /// Tool name.
    tool: String,
    /// Arguments as a JSON object.
    #[arg(default_value = "{}")]
    args: String,
    #[command(flatten)]
    grant: GrantArgs,
    /// Plugin config as a JSON object.
    #[arg(long, default_value = "{}")]
    config: String,
    /// Workspace directory passed in the call context.
    #[arg(long)]
    workspace: Option<PathBuf>,
}

/// Grant flags shared by commands that run a component.
#[derive(Args, Default)]
pub struct GrantArgs {
    /// Preopen a directory (same path in the guest); `:ro` (default) or `:rw`.
    #[arg(long = "allow-dir", value_name = "PATH[:ro|:rw]")]
    pub dirs: Vec<String>,
    /// Allow outbound HTTP to a host (`api.example.com`, `*.example.com`, `host:port`).
    #[arg(long = "allow-host", value_name = "HOST")]
    pub hosts: Vec<String>,
    /// Pass an environment variable by name.
    #[arg(long = "allow-env", value_name = "NAME")]
    pub env: Vec<String>,
    /// Grant the `process` capability.
    #[arg(long = "allow-process")]
    pub process: bool,
    /// Let outbound HTTP reach private, loopback and link-local addresses
    /// (by default only public ones, or hosts named literally by address).
    #[arg(long = "allow-private-network")]
    pub private_network: bool,
    /// Wall-clock limit per call.
    #[arg(long = "timeout-ms", value_name = "N")]
    pub timeout_ms: Option<u64>,
    /// Memory limit per instance.
    #[arg(long = "memory-mb", value_name = "N")]
    pub memory_mb: Option<u32>,
}

impl GrantArgs {
    /// The grant these flags describe.
    pub fn to_grant(&self) -> anyhow::Result<Grant> {
        let dirs = self.dirs.iter().map(|d| DirGrant::parse(d)).collect::<Result<Vec<_>, _>>()?;
        let g = Grant {
            dirs,
            hosts: self.hosts.clone(),
            env: self.env.clone(),
            process: self.process,
            memory_mb: self.memory_mb,
            timeout_ms: self.timeout_ms,
            output_limit_bytes: None,
            sandbox_off: false,
            private_network: self.private_network,
            ..Grant::default()
        };
        g.validate()?;
        Ok(g)
    }
}

fn runtime(opts: &RuntimeOptions) -> anyhow::Result<Arc<Runtime>> {
    Runtime::new(opts.clone())
}

fn load(rt: &Runtime, file: PathBuf, grant: Grant, config: serde_json::Value) -> anyhow::Result<Arc<PluginVersion>> {
    let id = file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "plugin".into());
    let grant = Grant { dev_source: dev_source_of(&file), ..grant };
    let spec = PluginSpec { id, path: file, config, grant, warm: false, on_invalid_config: Default::default() };
    Ok(rt.load(&spec)?)
}

/// A dev build of `wharf plugin dev` (`target/dev/NAME.wasm`) runs the
/// source published beside it (`NAME.src`), as a `dev = true` row does.
pub fn dev_source_of(file: &std::path::Path) -> Option<PathBuf> {
    let src = file.with_extension("src");
    src.is_dir().then_some(src)
}

/// Loads without the plugin's configuration (inspect/check have none).
fn inspect_load(rt: &Runtime, file: PathBuf) -> anyhow::Result<Arc<PluginVersion>> {
    let id = file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "plugin".into());
    let dev_source = dev_source_of(&file);
    let spec = PluginSpec {
        id,
        path: file,
        config: json!({}),
        grant: Grant { dev_source, ..Grant::default() },
        warm: false,
        on_invalid_config: Default::default(),
    };
    Ok(rt.load_for_inspection(&spec)?)
}

/// What the component was built against: `wharf:plugin@0.1.0`, or
/// `generic` for a component of plain WIT functions.
fn wit_label(v: &PluginVersion) -> String {
    match v.generic() {
        Some(_) => "generic (plain WIT functions, no wharf:plugin export)".into(),
        None => format!("wharf:plugin@{}", v.wit_version),
    }
}

/// A generic component's functions: tool name, WIT function, signature.
fn generic_json(v: &PluginVersion) -> serde_json::Value {
    let Some(g) = v.generic() else { return serde_json::Value::Null };
    g.functions
        .iter()
        .map(|f| json!({"tool": f.tool, "function": f.display, "signature": f.signature(), "docs": f.docs}))
        .collect()
}

fn describe_json(v: &PluginVersion) -> serde_json::Value {
    json!({
        "path": v.path,
        "digest": v.digest,
        "size": v.size,
        "wit": wit_label(v),
        "functions": generic_json(v),
        "kinds": v.kinds,
        "name": v.info.name,
        "version": v.info.version,
        "description": v.info.description,
        "requests": v.info.requests,
        "tools": v.tools,
        "compile": { "source": format!("{:?}", v.cache).to_lowercase(), "ms": v.load_time.as_secs_f64() * 1000.0 },
    })
}

/// What `wharf plugin call` gives a generic component's call: no session,
/// only somewhere for its streamed progress to go (stderr, as it comes).
struct StderrProgress;

impl SessionServices for StderrProgress {
    fn depth(&self) -> u32 {
        0
    }

    fn record_event(&self, _kind: &str, _data: serde_json::Value) -> Result<(), ServiceError> {
        Err(ServiceError::NoSession)
    }

    fn complete(&self, _request: CompleteRequest) -> BoxFuture<'_, Result<String, ServiceError>> {
        Box::pin(async { Err(ServiceError::NoSession) })
    }

    fn run_agent(&self, _task: AgentTask) -> BoxFuture<'_, Result<AgentOutcome, ServiceError>> {
        Box::pin(async { Err(ServiceError::NoSession) })
    }

    fn tool_progress(&self, text: &str) -> Result<bool, ServiceError> {
        use std::io::Write;
        let mut err = std::io::stderr().lock();
        // A closed stderr loses the progress, never the result.
        let _ = err.write_all(text.as_bytes()).and_then(|()| err.flush());
        Ok(true)
    }
}

/// Runs a plugin subcommand.
pub async fn run(cmd: PluginCommand, opts: RuntimeOptions) -> anyhow::Result<ExitCode> {
    match cmd {
        PluginCommand::Inspect { file, json } => {
            let rt = runtime(&opts)?;
            let v = tokio::task::spawn_blocking(move || inspect_load(&rt, file)).await??;
            if json {
                println!("{}", serde_json::to_string_pretty(&describe_json(&v))?);
            } else {
                print_inspect(&v);
            }
            Ok(ExitCode::SUCCESS)
        }
        PluginCommand::Check { file } => {
            let rt = runtime(&opts)?;
            let v = tokio::task::spawn_blocking(move || inspect_load(&rt, file)).await??;
            let kinds: Vec<String> = v.kinds.iter().map(|k| format!("{k:?}").to_lowercase()).collect();
            println!(
                "ok: {} ({} bytes, {}, kinds: {}, {} tool(s))",
                v.path.display(),
                v.size,
                wit_label(&v),
                kinds.join(", "),
                v.tools.len()
            );
            Ok(ExitCode::SUCCESS)
        }
        PluginCommand::Call(a) => {
            let args: serde_json::Value =
                serde_json::from_str(&a.args).with_context(|| format!("arguments are not valid JSON: {}", a.args))?;
            if !args.is_object() {
                anyhow::bail!("arguments must be a JSON object, got: {}", a.args);
            }
            let config: serde_json::Value =
                serde_json::from_str(&a.config).with_context(|| format!("--config is not valid JSON: {}", a.config))?;
            let grant = a.grant.to_grant()?;
            let rt = runtime(&opts)?;
            let file = a.file.clone();
            let v = tokio::task::spawn_blocking(move || load(&rt, file, grant, config)).await??;
            let Some(spec) = v.tools.iter().find(|t| t.name == a.tool) else {
                let names: Vec<&str> = v.tools.iter().map(|t| t.name.as_str()).collect();
                anyhow::bail!("{}: no tool `{}` (tools: {})", a.file.display(), a.tool, names.join(", "));
            };
            if let Err(e) = wharf_core::schema::validate(&spec.input_schema, &args) {
                let out = json!({"content": format!("invalid arguments: {e}"), "is_error": true, "error_code": wharf_core::plugin::ToolErrorCode::InvalidArguments});
                println!("{out}");
                return Ok(ExitCode::from(1));
            }
            let ctx = CallContext {
                session_id: "cli".into(),
                call_id: "call_0".into(),
                workspace: a.workspace.map(|w| w.display().to_string()),
                // A generic component's streamed result goes to stderr as
                // it comes (stdout carries the outcome).
                services: v.generic().is_some().then(|| Arc::new(StderrProgress) as Arc<dyn SessionServices>),
            };
            let out = match v.call_tool(&a.tool, &args.to_string(), &ctx).await {
                Ok(o) => json!({"content": o.content, "is_error": o.is_error, "error_code": o.error_code}),
                Err(e) => json!({"content": e.message, "is_error": true, "error_code": e.code}),
            };
            println!("{out}");
            let failed = out["is_error"].as_bool().unwrap_or(true);
            Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
        }
    }
}

fn print_inspect(v: &PluginVersion) {
    let kinds: Vec<String> = v.kinds.iter().map(|k| format!("{k:?}").to_lowercase()).collect();
    println!("{} {} — {}", v.info.name, v.info.version, v.info.description);
    println!("  file:     {} ({} bytes)", v.path.display(), v.size);
    println!("  digest:   {}", v.digest);
    println!("  wit:      {}", wit_label(v));
    println!("  kinds:    {}", kinds.join(", "));
    let r = &v.info.requests;
    println!(
        "  requests: filesystem={:?} hosts={:?} env={:?} process={} memory_mb={:?}",
        r.filesystem, r.hosts, r.env, r.process, r.memory_mb
    );
    for t in &v.tools {
        println!("  tool {} ({:?}): {}", t.name, t.mode, t.description.lines().next().unwrap_or(""));
        if let Some(f) = v.generic().and_then(|g| g.functions.iter().find(|f| f.tool == t.name)) {
            println!("    wit:    {}: {}", f.display, f.signature());
        }
        println!("    schema: {}", t.input_schema);
    }
}
