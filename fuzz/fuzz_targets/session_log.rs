//! The session store's reader and crash repair (`wharf_core::store`) on an
//! arbitrary log file: no panic; whatever loads also reopens (repair only
//! appends, and the repaired log loads); a log that satisfies the live-log
//! invariants is closed into one that satisfies the complete-log invariants.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wharf_core::SessionStore;
use wharf_core::invariants;

const ID: &str = "fuzz-session";

fuzz_target!(|data: &[u8]| {
    let dir = wharf_fuzz::scratch_dir();
    let store = SessionStore::new(dir);
    // The JSONL backend's file of a session (the store seam names no paths).
    let path = dir.join(format!("{ID}.jsonl"));
    if std::fs::write(&path, data).is_err() {
        return;
    }
    let loaded = store.load(ID);
    let _ = store.list();
    match store.open(ID) {
        Ok((log, report)) => {
            let loaded = loaded.expect("open accepted what load refused");
            drop(log);
            let after = std::fs::read(&path).unwrap_or_default();
            assert!(after.starts_with(data), "repair rewrote history");
            let repaired = store.load(ID).expect("the repaired log loads");
            assert_eq!(repaired.events.len(), loaded.events.len() + report.repairs.len());
            if invariants::check_prefix(&loaded.events).is_ok() {
                let broken = invariants::check(&repaired.events).err();
                assert!(broken.is_none(), "repair left a broken log: {broken:?}\nrepairs: {:?}", report.repairs);
            }
        }
        Err(e) => {
            // Refusing is fine for a damaged log, but not for one that loads
            // (short of an I/O problem in the scratch directory).
            if loaded.is_ok() {
                let msg = e.to_string();
                assert!(msg.contains("I/O") || msg.contains("disk"), "load accepted what open refused: {msg}");
            }
        }
    }
});
