//! An in-process host for tests: a profile (shipped, a file, or TOML text
//! built with [`scripted_model`] and friends), a workspace and a session
//! directory of their own, built through `wharf-harness` exactly as the
//! `wharf` binary builds its hosts — without spawning it. Tests that are
//! about the binary itself (exit codes, the terminal, installs) spawn it
//! with [`crate::wharf`]; the rest drive a [`TestHost`].

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use wharf_core::TurnSummary;
use wharf_core::events::{Event, StopReason};

use wharf_harness::{Harness, HostOptions, Notice};

/// The environment variable holding [`TEST_KEY`] in the test process. An
/// in-process host's plugins read the variables they are granted from this
/// process's environment (the binary's tests set them on the child), so a
/// profile whose model adapter needs a key names this one: its row's
/// `api_key_env` and `grant.env` (`-c plugin.ID.config.api_key_env=…` for
/// a shipped profile), and a `wharf-mock-llm` script checks [`TEST_KEY`].
pub const TEST_KEY_ENV: &str = "WHARF_TEST_MODEL_KEY";
/// The key [`TEST_KEY_ENV`] holds.
pub const TEST_KEY: &str = "sk-wharf-test-0123456789";

/// The key of the DeepSeek/OpenAI wire tests (`llm`, `daily_driver`): the
/// leak checks grep for it.
pub const LLM_KEY: &str = "sk-wharf-TEST-7c1e55d0a9b84f2e";
/// The variable their profiles name in `api_key_env`.
pub const LLM_KEY_ENV: &str = "WHARF_TEST_LLM_KEY";
/// The key of the Anthropic tests.
pub const ANTHROPIC_KEY: &str = "sk-ant-wharf-TEST-5b2f0c1d9e";
/// The variable their profiles name in `api_key_env`.
pub const ANTHROPIC_KEY_ENV: &str = "WHARF_TEST_ANTHROPIC_KEY";
/// A variable holding a key the Anthropic mock refuses.
pub const ANTHROPIC_WRONG_KEY_ENV: &str = "WHARF_TEST_ANTHROPIC_WRONG_KEY";

/// Every variable set in the test process before `main` (in-process hosts
/// read their own process's environment, as the binary does). Each has one
/// value for every test: a test that needs another value names another
/// variable. Child processes inherit them; none of these names is read by
/// a test that needs it unset.
pub const TEST_ENV: &[(&str, &str)] = &[
    (TEST_KEY_ENV, TEST_KEY),
    (LLM_KEY_ENV, LLM_KEY),
    (ANTHROPIC_KEY_ENV, ANTHROPIC_KEY),
    (ANTHROPIC_WRONG_KEY_ENV, "sk-ant-wrong"),
    // `mcp`: a host variable the MCP server must not see, and one a row
    // forwards with `${env:…}`.
    ("WHARF_TEST_SECRET", "leaked"),
    ("WHARF_TEST_FORWARD", "forwarded"),
];

/// Sets [`TEST_ENV`] before `main`: later, with tests running on other
/// threads, setting a variable would race their reads of the environment.
extern "C" fn set_test_env() {
    for (name, value) in TEST_ENV {
        // SAFETY: called from the initialiser section below, before
        // `main`, while the process has one thread.
        unsafe { std::env::set_var(name, value) };
    }
}

/// Runs [`set_test_env`] at load time (ELF `.init_array`, Mach-O
/// `__mod_init_func`). [`TestHost::builder`] refers to it so it is linked.
#[used]
#[cfg_attr(target_os = "linux", unsafe(link_section = ".init_array"))]
#[cfg_attr(target_os = "macos", unsafe(link_section = "__DATA,__mod_init_func"))]
static SET_TEST_ENV: extern "C" fn() = set_test_env;

/// How a [`TestHost`] is made.
#[derive(Debug, Default)]
pub struct TestHostBuilder {
    profile: Option<Profile>,
    workspace: Option<PathBuf>,
    home: Option<PathBuf>,
    sessions: Option<PathBuf>,
    overrides: Vec<String>,
    model: Option<String>,
    replay: Option<String>,
    watch: bool,
}

#[derive(Debug)]
enum Profile {
    Named(String),
    Text(String),
}

/// The row of the scripted model adapter (`llm-scripted.wasm`), as profile
/// TOML: `turns` is TOML for its `[[plugin.config.turns]]` tables (each a
/// model answer: `text`, `tool_calls`, …), played in order.
pub fn scripted_model(turns: &str) -> String {
    crate::plugin(crate::plugins::LLM_SCRIPTED);
    format!(
        "[[plugin]]\nid = \"scripted\"\npath = \"${{plugin_dir}}/llm-scripted.wasm\"\n\
         [plugin.config]\nmodel = \"scripted-test\"\n{turns}\n"
    )
}

impl TestHostBuilder {
    /// A shipped profile by name (`default`, `demo`, …) or a profile file.
    pub fn profile(mut self, name_or_path: impl Into<String>) -> Self {
        self.profile = Some(Profile::Named(name_or_path.into()));
        self
    }

    /// A profile given as TOML text (`${plugin_dir}`, `${workspace}` work as
    /// in any profile).
    pub fn profile_text(mut self, toml: impl Into<String>) -> Self {
        self.profile = Some(Profile::Text(toml.into()));
        self
    }

    /// The workspace (default: a fresh temporary directory).
    pub fn workspace(mut self, dir: impl Into<PathBuf>) -> Self {
        self.workspace = Some(dir.into());
        self
    }

    /// The user's home (`~`, `${home}`, the user config layer; default: a
    /// fresh directory).
    pub fn home(mut self, dir: impl Into<PathBuf>) -> Self {
        self.home = Some(dir.into());
        self
    }

    /// `--session-dir` (default: a fresh directory): hosts started one after
    /// the other on the same directory see each other's sessions, as runs
    /// of the binary do.
    pub fn sessions(mut self, dir: impl Into<PathBuf>) -> Self {
        self.sessions = Some(dir.into());
        self
    }

    /// A `-c KEY=VALUE` override.
    pub fn set(mut self, key_value: impl Into<String>) -> Self {
        self.overrides.push(key_value.into());
        self
    }

    /// `--model`.
    pub fn model(mut self, spec: impl Into<String>) -> Self {
        self.model = Some(spec.into());
        self
    }

    /// `--replay SESSION`: the recorded model outputs of a session of this
    /// host's session directory.
    pub fn replay(mut self, session: impl Into<String>) -> Self {
        self.replay = Some(session.into());
        self
    }

    /// Watch component and config files (off by default: tests that hot
    /// reload say so).
    pub fn watch(mut self, on: bool) -> Self {
        self.watch = on;
        self
    }

    /// Starts the host the way `wharf run` does (model key checked, `ask`
    /// run as `auto`), in `dir` (its home, workspace and sessions live
    /// there unless given).
    pub async fn start_in(self, dir: &Path) -> Result<TestHost> {
        let home = self.home.unwrap_or_else(|| dir.join("home"));
        let workspace = match self.workspace {
            Some(w) => w,
            None => dir.join("workspace"),
        };
        for d in [&home, &workspace] {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
        }
        let profile = match self.profile {
            None => "default".to_string(),
            Some(Profile::Named(n)) => n,
            Some(Profile::Text(text)) => {
                let path = dir.join("profile.toml");
                std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
                path.display().to_string()
            }
        };
        let sessions = self.sessions.unwrap_or_else(|| dir.join("sessions"));
        let notices = Arc::new(Mutex::new(Vec::new()));
        let sink = notices.clone();
        let options = HostOptions {
            notices: Some(Arc::new(move |n: Notice| {
                sink.lock().unwrap_or_else(|e| e.into_inner()).push(n.to_string());
            })),
            profile,
            overrides: self.overrides,
            workspace: Some(workspace.clone()),
            session_dir: Some(sessions.clone()),
            watch: self.watch,
            model: self.model,
            home: Some(home),
            plugin_dir: crate::target_dir().join("plugins"),
            plugin_dir_explicit: true,
            cache_dir: Some(crate::target_dir().join("test-cache")),
            ..HostOptions::default()
        };
        let harness = wharf_harness::headless::start(&options, self.replay.as_deref()).await?;
        Ok(TestHost { harness, workspace, sessions, notices })
    }
}

/// A host built in-process (see the module docs).
pub struct TestHost {
    /// The host.
    pub harness: Harness,
    /// Its workspace.
    pub workspace: PathBuf,
    /// Where its sessions are stored.
    pub sessions: PathBuf,
    notices: Arc<Mutex<Vec<String>>>,
}

/// One headless turn's outcome: what `wharf run --output jsonl` would show.
#[derive(Debug)]
pub struct Run {
    /// The session's id.
    pub session: String,
    /// How the turn ended.
    pub summary: TurnSummary,
    /// The session's events from the first of this turn's (a new session:
    /// from its header), read back from the store after the turn.
    pub events: Vec<Event>,
    /// The same events as a subscriber of the live session log received
    /// them while the turn ran (what `wharf run --output jsonl` streams);
    /// a test can check that the stream and the stored log agree.
    pub streamed: Vec<Event>,
}

impl Run {
    /// `wharf run`'s exit code: 0 only when the turn completed.
    pub fn exit_code(&self) -> i32 {
        if self.summary.reason == StopReason::Completed { 0 } else { 1 }
    }

    /// The events as the JSON lines `--output jsonl` prints.
    pub fn json(&self) -> Vec<Value> {
        self.events.iter().filter_map(|e| serde_json::to_value(e).ok()).collect()
    }
}

impl TestHost {
    /// A builder.
    pub fn builder() -> TestHostBuilder {
        std::hint::black_box(&SET_TEST_ENV);
        TestHostBuilder::default()
    }

    /// Runs `task` as one headless turn of a new session.
    pub async fn run(&self, task: &str) -> Result<Run> {
        self.run_with(None, task, None).await
    }

    /// Runs `task` as one headless turn, in session `resume` (any unique
    /// part of its id) or a new one, with a step budget.
    pub async fn run_with(&self, resume: Option<&str>, task: &str, max_steps: Option<u32>) -> Result<Run> {
        let h = &self.harness;
        let stop = tokio_util::sync::CancellationToken::new();
        let (agent, first_seq) = h.open_agent_until(resume, h.headless_approver(), max_steps, stop.clone())?;
        let mut stream = agent.log().subscribe_from(first_seq)?;
        if let Err(e) = h.mcp_ready().await {
            eprintln!("wharf-tests: MCP servers not ready: {e}");
        }
        let summary = agent.prompt(task.to_string()).await;
        agent.close_cells().await;
        // The session is closed as the binary's exit closes it, so a later
        // run can resume it: the log's last handle goes before returning.
        stop.cancel();
        agent.log().flush().await?;
        let released = agent.log().watch_release();
        let session = agent.session_id().to_string();
        drop(agent);
        let waited = tokio::time::timeout(std::time::Duration::from_secs(10), async {
            while !released.is_released() {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        })
        .await;
        anyhow::ensure!(waited.is_ok(), "session {session}'s log is still held 10 s after the turn");
        let summary = summary?;
        let mut streamed = Vec::new();
        while let Ok(ev) = stream.try_recv() {
            streamed.push(ev);
        }
        let events = h.store.load(&session)?.events.into_iter().filter(|e| e.seq >= first_seq).collect();
        Ok(Run { session, summary, events, streamed })
    }

    /// The host's notices so far, as `wharf` prints them after `wharf: `
    /// on stderr (`warning: …`).
    pub fn notices(&self) -> Vec<String> {
        self.notices.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Stops MCP servers and lets background work finish.
    pub async fn close(self) {
        self.harness.close().await;
    }
}
