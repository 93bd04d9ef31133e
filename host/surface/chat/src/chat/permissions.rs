//! `/permissions` in `wharf chat`: the permission-mode presets.

use super::Chat;
use wharf_harness::permissions;

impl Chat {
    /// The permission-mode part of the status line: the current preset.
    pub(super) fn permission_status(&self) -> Option<String> {
        permissions::current(&self.host).map(|p| format!("permissions: {p}"))
    }

    /// `/permissions` lists the presets with the current one marked;
    /// `/permissions PRESET` switches to it (also while a turn runs: calls
    /// being decided finish under the old preset).
    pub(super) fn permissions_command(&mut self, arg: &str) {
        let o = &self.out;
        if arg.is_empty() {
            o.line(&permissions::listing(permissions::current(&self.host).as_deref()));
            return;
        }
        // The chat loop is synchronous here; the switch is a short plugin
        // reload (the component is compiled already).
        let host = &self.host;
        let switched =
            tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(permissions::switch(host, arg)));
        match switched {
            Ok(p) => o.line(&o.dim(&format!("permissions: {p} — {}", permissions::describe(p).unwrap_or_default()))),
            Err(e) => o.line(&o.warn(&format!("/permissions: {}", wharf_cli_common::output::error_text(&e)))),
        }
    }
}
