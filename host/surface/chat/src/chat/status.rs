//! The chat status line: model, context use, cost, permission mode.

use super::Chat;

impl Chat {
    /// One line shown with the prompt; each part comes from its owner
    /// module (`model.rs`, `permissions.rs`).
    pub(super) fn status_line(&self) -> String {
        let parts: Vec<String> = [self.model_status(), self.permission_status()].into_iter().flatten().collect();
        parts.join(" · ")
    }
}
