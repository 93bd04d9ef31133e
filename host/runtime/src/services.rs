//! The `session`, `model`, `agents`, `tools` and `questions` imports: a
//! component working for a session reaches it through the
//! [`SessionServices`] the core hands to each call. `model`, `agents`,
//! `tools` and `questions` also need the operator's grant.

use std::sync::Arc;

use wharf_core::plugin::{
    AgentTask, CompleteRequest, Message, Role, ServiceError, SessionServices, ToolCall, ToolErrorCode, ToolMode,
    ToolRequest,
};

use crate::bindings::wharf::plugin as wit;
use crate::bindings::wharf::plugin::types as wt;
use crate::grants::ToolsGrant;
use crate::state::HostState;

fn to_wit_error(e: ServiceError) -> wit::session::SessionError {
    use wit::session::SessionError as W;
    match e {
        ServiceError::NoSession => W::NoSession,
        ServiceError::NotGranted(c) => W::NotGranted(c),
        ServiceError::Invalid(m) => W::Invalid(m),
        ServiceError::Failed(m) => W::Failed(m),
        ServiceError::Cancelled => W::Cancelled,
    }
}

/// Converts a guest message to the core's.
pub fn from_wit_message(m: wt::Message) -> Message {
    Message {
        role: match m.role {
            wt::Role::System => Role::System,
            wt::Role::User => Role::User,
            wt::Role::Assistant => Role::Assistant,
            wt::Role::Tool => Role::Tool,
        },
        content: m.content,
        reasoning: m.reasoning,
        tool_calls: m
            .tool_calls
            .into_iter()
            .map(|c| ToolCall { id: c.id, name: c.name, arguments: c.arguments })
            .collect(),
        tool_call_id: m.tool_call_id,
    }
}

impl HostState {
    /// The session behind this call, if the capability is granted.
    fn session_for(&self, capability: Option<&str>) -> Result<Arc<dyn SessionServices>, wit::session::SessionError> {
        if let Some(cap) = capability {
            let granted = match cap {
                "model" => self.effective.model,
                "agents" => self.effective.agents,
                "questions" => self.effective.questions,
                _ => false,
            };
            if !granted {
                return Err(wit::session::SessionError::NotGranted(cap.to_string()));
            }
        }
        self.services.clone().ok_or(wit::session::SessionError::NoSession)
    }
}

impl wit::session::Host for HostState {
    fn record_event(&mut self, kind: String, data: String) -> wasmtime::Result<Result<(), wit::session::SessionError>> {
        let services = match self.session_for(None) {
            Ok(s) => s,
            Err(e) => return Ok(Err(e)),
        };
        // Refuse an oversized event before parsing it (the core checks the
        // same bound on the value, and the per-call and per-session ones).
        if data.len() > wharf_core::services::MAX_EVENT_BYTES {
            return Ok(Err(wit::session::SessionError::Invalid(format!(
                "an event holds at most {} bytes of JSON, got {}",
                wharf_core::services::MAX_EVENT_BYTES,
                data.len()
            ))));
        }
        let value = match serde_json::from_str(&data) {
            Ok(v) => v,
            Err(e) => return Ok(Err(wit::session::SessionError::Invalid(format!("event data is not JSON: {e}")))),
        };
        Ok(services.record_event(&kind, value).map_err(to_wit_error))
    }

    fn depth(&mut self) -> wasmtime::Result<u32> {
        Ok(self.services.as_ref().map_or(0, |s| s.depth()))
    }
}

impl wit::model::Host for HostState {
    async fn complete(
        &mut self,
        system: String,
        messages: Vec<wt::Message>,
        max_tokens: Option<u32>,
    ) -> wasmtime::Result<Result<String, wit::session::SessionError>> {
        let services = match self.session_for(Some("model")) {
            Ok(s) => s,
            Err(e) => return Ok(Err(e)),
        };
        let request =
            CompleteRequest { system, messages: messages.into_iter().map(from_wit_message).collect(), max_tokens };
        Ok(services.complete(request).await.map_err(to_wit_error))
    }
}

impl wit::agents::Host for HostState {
    async fn run(
        &mut self,
        task: wit::agents::AgentTask,
    ) -> wasmtime::Result<Result<wit::agents::AgentResult, wit::session::SessionError>> {
        let services = match self.session_for(Some("agents")) {
            Ok(s) => s,
            Err(e) => return Ok(Err(e)),
        };
        let task = AgentTask {
            prompt: task.prompt,
            tools: task.tools,
            max_steps: task.max_steps,
            instructions: task.instructions,
        };
        Ok(services
            .run_agent(task)
            .await
            .map(|o| wit::agents::AgentResult {
                session_id: o.session_id,
                text: o.text,
                stop_reason: o.stop_reason,
                steps: o.steps,
            })
            .map_err(to_wit_error))
    }
}

/// Most calls one `call-batch` may carry.
const MAX_BATCH: usize = wharf_core::services::MAX_BATCH;

impl HostState {
    /// The `tools` grant as a name filter (`None`: every tool), or why not.
    fn tools_grant(&self) -> Result<Option<Vec<String>>, wit::session::SessionError> {
        match &self.effective.tools {
            ToolsGrant::None => Err(wit::session::SessionError::NotGranted("tools".into())),
            ToolsGrant::All => Ok(None),
            ToolsGrant::Only(names) => Ok(Some(names.clone())),
        }
    }
}

impl wit::tools::Host for HostState {
    async fn list_tools(&mut self) -> wasmtime::Result<Result<Vec<wt::ToolSpec>, wit::session::SessionError>> {
        let allowed = match self.tools_grant() {
            Ok(a) => a,
            Err(e) => return Ok(Err(e)),
        };
        let services = match self.session_for(None) {
            Ok(s) => s,
            Err(e) => return Ok(Err(e)),
        };
        Ok(services
            .list_tools(allowed.as_deref())
            .map(|specs| {
                specs
                    .into_iter()
                    .map(|t| wt::ToolSpec {
                        name: t.name,
                        description: t.description,
                        input_schema: t.input_schema.to_string(),
                        mode: match t.mode {
                            ToolMode::Parallel => wt::ToolMode::Parallel,
                            ToolMode::Exclusive => wt::ToolMode::Exclusive,
                        },
                    })
                    .collect()
            })
            .map_err(to_wit_error))
    }

    async fn call_batch(
        &mut self,
        calls: Vec<wit::tools::ToolRequest>,
    ) -> wasmtime::Result<Result<Vec<Result<wt::ToolOutput, wt::ToolError>>, wit::session::SessionError>> {
        let allowed = match self.tools_grant() {
            Ok(a) => a,
            Err(e) => return Ok(Err(e)),
        };
        let services = match self.session_for(None) {
            Ok(s) => s,
            Err(e) => return Ok(Err(e)),
        };
        if calls.len() > MAX_BATCH {
            return Ok(Err(wit::session::SessionError::Invalid(format!(
                "a batch holds at most {MAX_BATCH} calls, got {}",
                calls.len()
            ))));
        }
        let requests = calls.into_iter().map(|c| ToolRequest { name: c.name, arguments: c.arguments }).collect();
        // The program's own deadline (`limit-time`) also bounds the calls
        // it waits for; past it the call stops like any guest past its time.
        let deadline = tokio::time::Instant::from_std(self.deadline);
        let outcomes = match tokio::time::timeout_at(deadline, services.call_tools(requests, allowed)).await {
            Ok(r) => r,
            Err(_) => return Err(crate::state::LimitError::Timeout(self.timeout_ms).into()),
        };
        Ok(outcomes
            .map(|list| {
                list.into_iter()
                    .map(|o| {
                        if o.is_error {
                            Err(wt::ToolError {
                                code: o.error_code.unwrap_or(ToolErrorCode::ToolError).to_string(),
                                message: o.content,
                            })
                        } else {
                            Ok(wt::ToolOutput { content: o.content, details: o.details.map(|d| d.to_string()) })
                        }
                    })
                    .collect()
            })
            .map_err(to_wit_error))
    }

    async fn limit_time(&mut self, ms: u64) -> wasmtime::Result<()> {
        // Only ever shortens the call's deadline (the grant's is the cap).
        let at = std::time::Instant::now() + std::time::Duration::from_millis(ms);
        if at < self.deadline {
            self.deadline = at;
            self.timeout_ms = ms;
        }
        Ok(())
    }
}

impl wit::questions::Host for HostState {
    async fn ask(
        &mut self,
        message: String,
        schema: String,
    ) -> wasmtime::Result<Result<wit::questions::Answer, wit::session::SessionError>> {
        use wharf_core::question::{Answer, Form, MAX_SCHEMA_BYTES};
        use wit::session::SessionError as E;
        let services = match self.session_for(Some("questions")) {
            Ok(s) => s,
            Err(e) => return Ok(Err(e)),
        };
        // Bounded before parsing; `Form::parse` bounds the rest (message,
        // fields, texts, options) and refuses anything but a flat form.
        if schema.len() > MAX_SCHEMA_BYTES {
            return Ok(Err(E::Invalid(format!(
                "the schema is {} bytes of JSON (at most {MAX_SCHEMA_BYTES})",
                schema.len()
            ))));
        }
        let schema = match serde_json::from_str(&schema) {
            Ok(v) => v,
            Err(e) => return Ok(Err(E::Invalid(format!("the schema is not JSON: {e}")))),
        };
        let form = match Form::parse(&message, &schema) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(plugin = %self.plugin_id(), "refused a question: {e}");
                return Ok(Err(E::Invalid(format!("question refused: {e}"))));
            }
        };
        // The call's deadline bounds the wait. A tool past it ends as any
        // guest past its time; a policy's question ends a little earlier
        // with `cancel`, leaving the policy time to decide. Either way the
        // core logs the question cancelled.
        let ask = services.ask_user(self.plugin_id().to_string(), form);
        let reply = if self.policy_call {
            let at = self.deadline.checked_sub(policy_reserve(self.timeout_ms)).unwrap_or(self.deadline);
            match tokio::time::timeout_at(tokio::time::Instant::from_std(at), ask).await {
                Ok(r) => r,
                Err(_) => return Ok(Ok(wit::questions::Answer::Cancel)),
            }
        } else {
            match tokio::time::timeout_at(tokio::time::Instant::from_std(self.deadline), ask).await {
                Ok(r) => r,
                Err(_) => return Err(crate::state::LimitError::Timeout(self.timeout_ms).into()),
            }
        };
        Ok(reply
            .map(|r| match r.answer {
                Answer::Accept(content) => {
                    wit::questions::Answer::Accept(serde_json::Value::Object(content).to_string())
                }
                Answer::Decline => wit::questions::Answer::Decline,
                Answer::Cancel => wit::questions::Answer::Cancel,
            })
            .map_err(to_wit_error))
    }
}

/// How long before a policy's deadline its open question is ended with
/// `cancel`: a tenth of its time limit, between 20 ms and 1 s (the policy's
/// decision after the answer is quick; the rest is the user's).
pub(crate) fn policy_reserve(timeout_ms: u64) -> std::time::Duration {
    std::time::Duration::from_millis((timeout_ms / 10).clamp(20, 1000))
}
