//! Skills plugins in the system prompt.
//!
//! A plugin version that exports `skills` registers a listener on the
//! `system-prompt` waterfall ([`SkillsHook`]): it appends a compact catalog
//! section (each skill's name and description, and which tool loads one) to
//! the prompt of every step. Being a registration of the version, it is
//! revoked with it on unload or replace, like the version's tools.
//!
//! The catalog is asked of the component (a fresh sandbox) only when the
//! skill files may have changed: the listener keeps the last section with a
//! fingerprint of the skill roots — the plugin's `dirs` config (the
//! convention of the `skills` plugin) and those of its granted directories
//! that do not merely hold a configured one, each
//! walked two levels deep (`ROOT/NAME/SKILL.md`), names, sizes and
//! modification times — and re-asks when the fingerprint differs, when it
//! is older than [`MAX_AGE`] (for catalogs that depend on something else),
//! or when the roots are too large to fingerprint ([`MAX_ENTRIES`]).

use std::collections::hash_map::DefaultHasher;
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use serde_json::Value;
use wharf_core::plugin::{BoxFuture, Hook, HookOutcome, HookPoint, PluginError, PluginRef};

use crate::bindings::exports::wharf::plugin as ex;
use crate::component::PluginVersion;

/// Priority of the catalog listener on `system-prompt`: early, so other
/// listeners see the prompt with the catalog in it.
pub const SKILLS_PROMPT_PRIORITY: i32 = -1000;
/// Longest a cached catalog is trusted without asking the component again.
pub const MAX_AGE: Duration = Duration::from_secs(30);
/// Directory entries beyond which the roots are not fingerprinted (and the
/// catalog is asked for every step).
pub const MAX_ENTRIES: usize = 4096;
/// Most skills listed in the prompt.
const MAX_SKILLS: usize = 200;
/// Longest description in the prompt, in characters.
const MAX_DESCRIPTION_CHARS: usize = 300;

/// The `system-prompt` listener of a skills plugin version; it also carries
/// the version's own hook listener when the component exports `hooks` too
/// (a registration set has one hook slot).
pub struct SkillsHook {
    version: Arc<PluginVersion>,
    plugin: PluginRef,
    subs: Vec<(HookPoint, i32)>,
    inner: Option<Arc<dyn Hook>>,
    roots: Vec<PathBuf>,
    cache: tokio::sync::Mutex<Option<Cached>>,
}

struct Cached {
    fingerprint: Option<u64>,
    at: Instant,
    section: Option<String>,
}

impl SkillsHook {
    /// The listener for `version`, wrapping `inner` (the version's own hooks).
    pub fn new(version: Arc<PluginVersion>, plugin: PluginRef, inner: Option<Arc<dyn Hook>>) -> Self {
        let mut subs: Vec<(HookPoint, i32)> = inner.as_ref().map(|h| h.subscriptions().to_vec()).unwrap_or_default();
        if !subs.iter().any(|(p, _)| *p == HookPoint::SystemPrompt) {
            subs.push((HookPoint::SystemPrompt, SKILLS_PROMPT_PRIORITY));
        }
        let roots = roots(&version);
        Self { version, plugin, subs, inner, roots, cache: tokio::sync::Mutex::new(None) }
    }

    /// The catalog section for the current files (`None`: no skills, or the
    /// catalog failed, which is logged).
    pub async fn section(&self) -> Option<String> {
        let mut cache = self.cache.lock().await;
        let fingerprint = fingerprint(&self.roots);
        if let Some(c) = cache.as_ref()
            && fingerprint.is_some()
            && c.fingerprint == fingerprint
            && c.at.elapsed() < MAX_AGE
        {
            return c.section.clone();
        }
        let section = match self.version.call_skills_catalog().await {
            Ok(list) => render(&list, &tool_name(&self.version)),
            Err(e) => {
                tracing::warn!(plugin = %self.plugin.id, error = %e, "skills catalog failed");
                None
            }
        };
        *cache = Some(Cached { fingerprint, at: Instant::now(), section: section.clone() });
        section
    }
}

impl Hook for SkillsHook {
    fn plugin(&self) -> &PluginRef {
        &self.plugin
    }

    fn subscriptions(&self) -> &[(HookPoint, i32)] {
        &self.subs
    }

    fn handle(&self, point: HookPoint, payload: Value) -> BoxFuture<'_, Result<HookOutcome, PluginError>> {
        Box::pin(async move {
            let inner = self.inner.as_ref().filter(|h| h.subscriptions().iter().any(|(p, _)| *p == point));
            if point != HookPoint::SystemPrompt {
                return match inner {
                    Some(h) => h.handle(point, payload).await,
                    None => Ok(HookOutcome::Pass),
                };
            }
            let payload = match self.section().await {
                Some(section) => append(payload, &section),
                None => payload,
            };
            match inner {
                Some(h) => match h.handle(point, payload.clone()).await? {
                    HookOutcome::Pass => Ok(HookOutcome::Replace(payload)),
                    other => Ok(other),
                },
                None => Ok(HookOutcome::Replace(payload)),
            }
        })
    }
}

/// Appends `section` to the prompt of a `system-prompt` payload (an object
/// with `prompt`, or the prompt itself after a listener replaced it so).
fn append(payload: Value, section: &str) -> Value {
    let join = |prompt: &str| {
        if prompt.trim().is_empty() { section.to_string() } else { format!("{}\n\n{section}", prompt.trim_end()) }
    };
    match payload {
        Value::String(s) => Value::String(join(&s)),
        Value::Object(mut m) => {
            let prompt = m.get("prompt").and_then(Value::as_str).unwrap_or("").to_string();
            m.insert("prompt".into(), Value::String(join(&prompt)));
            Value::Object(m)
        }
        other => other,
    }
}

/// The tool that loads a skill: `skill` if the plugin has it, else its only
/// tool.
fn tool_name(version: &PluginVersion) -> Option<String> {
    let names: Vec<&str> = version.tools.iter().map(|t| t.name.as_str()).collect();
    if names.contains(&"skill") {
        return Some("skill".into());
    }
    (names.len() == 1).then(|| names[0].to_string())
}

fn one_line(s: &str, max: usize) -> String {
    let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if s.chars().count() <= max {
        return s;
    }
    let mut cut: String = s.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// The prompt section for a catalog; `None` when it is empty.
pub fn render(list: &[ex::skills::SkillSummary], tool: &Option<String>) -> Option<String> {
    let list: Vec<_> = list.iter().filter(|s| !s.name.trim().is_empty()).collect();
    if list.is_empty() {
        return None;
    }
    let how = match tool {
        Some(t) => format!("load one with the `{t}` tool"),
        None => "ask for one by name".to_string(),
    };
    let mut out =
        format!("# Skills\n\nSkills available ({how} before a task it covers, then follow its instructions):\n");
    for s in list.iter().take(MAX_SKILLS) {
        let _ = writeln!(out, "- {} — {}", one_line(&s.name, 64), one_line(&s.description, MAX_DESCRIPTION_CHARS));
    }
    if list.len() > MAX_SKILLS {
        let _ = writeln!(out, "- … and {} more", list.len() - MAX_SKILLS);
    }
    Some(out.trim_end().to_string())
}

/// Where a version's skills live: its `dirs` config, and each granted
/// directory that does not merely hold one of those. The default profile
/// grants the whole workspace so that the plugin can read `.wharf/skills`
/// in it; fingerprinting that grant would stat every file two levels down
/// the workspace at every step (and past [`MAX_ENTRIES`], in a large
/// repository, ask the component for its catalog at every step).
fn roots(version: &PluginVersion) -> Vec<PathBuf> {
    let granted: Vec<&Path> = version.effective.dirs.iter().map(|d| d.path.as_path()).collect();
    roots_of(version.config(), version.effective.env.iter().any(|e| e == "HOME"), &granted)
}

/// [`roots`] from the plugin's config, whether it is granted `HOME`, and
/// its granted directories (canonical paths).
fn roots_of(config: &Value, home_granted: bool, granted: &[&Path]) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = match config.get("dirs") {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .filter_map(|d| match d.strip_prefix("~/") {
                // The plugin resolves `~/` with the HOME it is granted, so
                // the host reads HOME only when the grant hands it over.
                Some(rest) if home_granted => std::env::var_os("HOME").map(|h| PathBuf::from(h).join(rest)),
                Some(_) => None,
                None => Some(PathBuf::from(d)),
            })
            .collect(),
        _ => Vec::new(),
    };
    let configured: Vec<PathBuf> = roots.iter().map(|r| resolved(r)).collect();
    for &dir in granted {
        let holds_a_root = configured.iter().any(|r| r.starts_with(dir));
        if !holds_a_root && !roots.iter().any(|r| r == dir) {
            roots.push(dir.to_path_buf());
        }
    }
    roots
}

/// `path` with its deepest existing ancestor canonicalized (a skills
/// directory often does not exist yet), to compare with grant paths, which
/// are canonical.
fn resolved(path: &Path) -> PathBuf {
    let mut missing = Vec::new();
    let mut at = path;
    loop {
        if let Ok(mut canon) = at.canonicalize() {
            canon.extend(missing.iter().rev());
            return canon;
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                missing.push(name);
                at = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// A hash of the names, sizes and modification times of `roots` and of
/// what lies one and two levels below them; `None` past [`MAX_ENTRIES`].
pub fn fingerprint(roots: &[PathBuf]) -> Option<u64> {
    let mut h = DefaultHasher::new();
    let mut entries = 0usize;
    for root in roots {
        stat(&mut h, root);
        walk(&mut h, root, 2, &mut entries)?;
    }
    Some(h.finish())
}

fn stat(h: &mut DefaultHasher, path: &Path) {
    path.hash(h);
    match std::fs::metadata(path) {
        Ok(m) => {
            m.len().hash(h);
            m.is_dir().hash(h);
            m.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).hash(h);
        }
        Err(_) => 0xdead_u32.hash(h),
    }
}

fn walk(h: &mut DefaultHasher, dir: &Path, depth: usize, entries: &mut usize) -> Option<()> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Some(()) };
    let mut paths: Vec<PathBuf> = rd.filter_map(Result::ok).map(|e| e.path()).collect();
    *entries += paths.len();
    if *entries > MAX_ENTRIES {
        return None;
    }
    paths.sort();
    for p in paths {
        stat(h, &p);
        if depth > 1 && p.is_dir() {
            walk(h, &p, depth - 1, entries)?;
        }
    }
    Some(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn summary(name: &str, description: &str) -> ex::skills::SkillSummary {
        ex::skills::SkillSummary { name: name.into(), description: description.into() }
    }

    #[test]
    fn section_lists_names_and_descriptions() {
        let list = [summary("pdf", "Fill PDF\nforms."), summary(" ", "nameless"), summary("xlsx", &"x".repeat(400))];
        let s = render(&list, &Some("skill".into())).unwrap();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "# Skills");
        assert!(lines[2].contains("load one with the `skill` tool"), "{s}");
        assert_eq!(lines[3], "- pdf — Fill PDF forms.");
        assert!(lines[4].starts_with("- xlsx — xxx") && lines[4].ends_with('…'), "{s}");
        assert_eq!(lines.len(), 5);
        assert_eq!(render(&[], &None), None);
    }

    #[test]
    fn append_handles_object_and_string_payloads() {
        let p = append(json!({"turn": 1, "prompt": "Base.\n"}), "S");
        assert_eq!(p, json!({"turn": 1, "prompt": "Base.\n\nS"}));
        assert_eq!(append(json!({"turn": 1}), "S")["prompt"], "S");
        assert_eq!(append(json!("Base."), "S"), json!("Base.\n\nS"));
    }

    #[test]
    fn a_grant_that_only_holds_the_skill_dirs_is_not_walked() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap().join("ws");
        let other = dir.path().canonicalize().unwrap().join("shared-skills");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        // Through a symlink, as a workspace under /tmp often is.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&ws, &link).unwrap();
        let config = json!({"dirs": [format!("{}/.wharf/skills", link.display())]});
        let roots = roots_of(&config, false, &[ws.as_path(), other.as_path()]);
        assert_eq!(roots, vec![link.join(".wharf/skills"), other.clone()]);
        // Without `dirs`, the grants are the roots.
        assert_eq!(roots_of(&json!({}), false, &[ws.as_path()]), vec![ws.clone()]);
        // A configured root that is itself granted is listed once.
        let config = json!({"dirs": [other.display().to_string()]});
        assert_eq!(roots_of(&config, false, &[other.as_path()]), vec![other.clone()]);
        // `~/` needs the HOME grant.
        let config = json!({"dirs": ["~/.wharf/skills"]});
        assert_eq!(roots_of(&config, false, &[]), Vec::<PathBuf>::new());
    }

    #[test]
    fn fingerprint_follows_skill_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("skills");
        let missing = fingerprint(std::slice::from_ref(&root)).unwrap();
        std::fs::create_dir_all(root.join("pdf")).unwrap();
        let empty = fingerprint(std::slice::from_ref(&root)).unwrap();
        assert_ne!(missing, empty);
        std::fs::write(root.join("pdf/SKILL.md"), "a").unwrap();
        let one = fingerprint(std::slice::from_ref(&root)).unwrap();
        assert_ne!(one, empty);
        assert_eq!(fingerprint(std::slice::from_ref(&root)).unwrap(), one);
        // Same mtime second is fine: the size changes too.
        std::fs::write(root.join("pdf/SKILL.md"), "ab").unwrap();
        assert_ne!(fingerprint(std::slice::from_ref(&root)).unwrap(), one);
        for i in 0..=MAX_ENTRIES {
            std::fs::write(root.join(format!("f{i}")), "").unwrap();
        }
        assert_eq!(fingerprint(std::slice::from_ref(&root)), None);
    }

    /// Per-step cost of the catalog section with the built `skills`
    /// component: a cache hit (fingerprint only) against a miss (a fresh
    /// sandbox running `catalog()`), medians over interleaved rounds. Needs
    /// `target/plugins/skills.wasm`: `cargo test -p wharf-runtime --lib
    /// skills::tests::step_cost -- --ignored --nocapture`.
    #[test]
    #[ignore = "measurement; needs the built skills component"]
    fn step_cost() {
        use crate::grants::{Access, DirGrant, Grant};
        use crate::{PluginSpec, Runtime, RuntimeOptions};
        let wasm = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/plugins/skills.wasm");
        let dir = tempfile::tempdir().unwrap();
        for i in 0..20 {
            let d = dir.path().join(format!("skill{i:02}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("SKILL.md"), format!("---\nname: skill{i:02}\ndescription: Skill {i}.\n---\nBody\n"))
                .unwrap();
        }
        let rt = Runtime::new(RuntimeOptions::default()).unwrap();
        let grant = Grant { dirs: vec![DirGrant::new(dir.path(), Access::Ro).unwrap()], ..Grant::default() };
        let root = grant.dirs[0].path.display().to_string();
        let spec = PluginSpec {
            id: "skills".into(),
            path: wasm,
            config: json!({"dirs": [root]}),
            grant,
            warm: false,
            on_invalid_config: Default::default(),
        };
        let version = rt.load(&spec).unwrap();
        let hook = SkillsHook::new(version.clone(), version.plugin_ref(), None);
        let tokio = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
        let (mut hits, mut misses) = (Vec::new(), Vec::new());
        tokio.block_on(async {
            assert!(hook.section().await.unwrap().contains("- skill19 — Skill 19."));
            for _ in 0..50 {
                let t = Instant::now();
                assert!(hook.section().await.is_some());
                hits.push(t.elapsed());
                *hook.cache.lock().await = None;
                let t = Instant::now();
                assert!(hook.section().await.is_some());
                misses.push(t.elapsed());
            }
        });
        hits.sort();
        misses.sort();
        let (hit, miss) = (hits[hits.len() / 2], misses[misses.len() / 2]);
        println!(
            "skills section per step (20 skills): cache hit {:.1} µs, miss {:.1} µs, miss/hit {:.0}x",
            hit.as_secs_f64() * 1e6,
            miss.as_secs_f64() * 1e6,
            miss.as_secs_f64() / hit.as_secs_f64()
        );
    }
}
