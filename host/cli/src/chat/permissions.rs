//! `/permissions` in `wharf chat`: the permission-mode presets.

use super::Chat;

impl Chat {
    /// The permission-mode part of the status line.
    pub(super) fn permission_status(&self) -> Option<String> {
        None
    }
}
