//! `/model`, context-window use and cost in `wharf chat`.

use super::Chat;

impl Chat {
    /// The model part of the status line (model, context %, cost).
    pub(super) fn model_status(&self) -> Option<String> {
        None
    }
}
