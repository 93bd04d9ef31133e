//! `{{name}}`: a Wharf model adapter. This one is an echo model (replies
//! with the last user message); replace `start` with requests to a real API
//! over `wasi:http` (and ask for its host with `PluginInfo::hosts`).

use wharf_sdk::prelude::*;

struct Plugin;

impl LlmPlugin for Plugin {
    type Stream = BatchStream;

    fn info() -> PluginInfo {
        PluginInfo::new("{{name}}", env!("CARGO_PKG_VERSION"), "Echo model adapter.")
    }

    fn model() -> ModelInfo {
        ModelInfo::new("{{name}}-echo", 8192)
    }

    fn start(req: LlmRequest) -> Result<BatchStream, LlmError> {
        Ok(BatchStream::new(reply(&req)))
    }
}

fn reply(req: &LlmRequest) -> Vec<Vec<Event>> {
    let last = req.messages.iter().rev().find(|m| m.role == Role::User).map(|m| m.content.clone());
    let text = format!("echo: {}", last.unwrap_or_default());
    vec![vec![Event::text(text)], vec![Event::Finish(FinishReason::Stop)]]
}

wharf_sdk::export_llm!(Plugin);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoes_the_last_user_message() {
        let msg = Message {
            role: Role::User,
            content: "hi".into(),
            reasoning: None,
            tool_calls: Vec::new(),
            tool_call_id: None,
        };
        let req = LlmRequest { system: String::new(), messages: vec![msg], tools: Vec::new(), max_tokens: None };
        let batches = reply(&req);
        assert!(matches!(&batches[0][0], Event::Text(t) if t == "echo: hi"));
    }
}
