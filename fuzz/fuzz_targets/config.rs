//! Profile loading (`wharf_config::load`): an arbitrary profile file, patch
//! file and `-c` overrides compose into a config or a located error, never a
//! panic; a composed config dumps, and loading is deterministic.
//!
//! Input: profile TOML, NUL, patch TOML (absent if no NUL), NUL, then
//! overrides one per line.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wharf_config::LoadOptions;
use wharf_fuzz::Input;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let profile = input.field(0);
    let has_patch = !input.is_empty();
    let patch = input.field(0);
    let overrides: Vec<String> = String::from_utf8_lossy(input.rest()).lines().take(8).map(str::to_string).collect();
    let d = wharf_fuzz::scratch_dir();
    let profile_path = d.join("profile.toml");
    let patch_path = d.join("patch.toml");
    if std::fs::write(&profile_path, profile).is_err() || std::fs::write(&patch_path, patch).is_err() {
        return;
    }
    let opts = LoadOptions {
        profile: profile_path.display().to_string(),
        workspace: d.clone(),
        home: None,
        plugin_dir: d.join("plugins"),
        patches: if has_patch { vec![patch_path] } else { vec![] },
        overrides,
        ..LoadOptions::default()
    };
    let first = wharf_config::load(&opts);
    match &first {
        Ok(cfg) => {
            let dump = cfg.dump();
            let _ = cfg.dump_json();
            let again = wharf_config::load(&opts).expect("a second load of what loaded");
            assert_eq!(again.dump(), dump, "loading is not deterministic");
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.is_empty());
            assert!(wharf_config::load(&opts).is_err(), "second load succeeded after: {msg}");
        }
    }
});
