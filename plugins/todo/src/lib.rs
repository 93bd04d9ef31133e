//! `todo`: the agent's task list.
//!
//! - `todo_write {todos}` replaces the whole list, records it in the session
//!   log as a `todo/updated` event (`{"items": [...]}`, which the chat, ACP
//!   and web surfaces render) and returns a compact rendering for the model.
//! - `todo_read {}` returns the current list of the session.
//!
//! An item is `{"content", "status", "active_form"?, "id"?}` with `status`
//! one of `pending`, `in_progress`, `completed`; a list has at most 200
//! items. These are the rules the host applies to `todo/updated`, checked
//! here first so the model gets a precise error and no event is written.
//!
//! The list is also kept in the plugin's `kv` store per session (for
//! `todo_read`; the store holds the lists of the most recent sessions only).
//! Outside a session (`wharf plugin call`) nothing is recorded and the result
//! says so.

use std::fmt::Write as _;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use wharf_sdk::prelude::*;
use wharf_sdk::session::{self, SessionError};

/// Most items in one list (the host's limit on `todo/updated`).
const MAX_ITEMS: usize = 200;
/// Longest `content` / `active_form`, in characters.
const MAX_TEXT_CHARS: usize = 2_000;
/// Longest `id`, in characters.
const MAX_ID_CHARS: usize = 100;
/// Sessions whose lists are kept in `kv` for `todo_read`.
const KEPT_SESSIONS: usize = 32;
/// `kv` key of the session ids with a stored list, oldest first.
const INDEX_KEY: &str = "todo/index";

/// Status of a todo item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Status {
    /// Not started.
    Pending,
    /// Being worked on now (keep one at a time).
    InProgress,
    /// Done.
    Completed,
}

impl Status {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => Self::Pending,
            "in_progress" => Self::InProgress,
            "completed" => Self::Completed,
            _ => return None,
        })
    }

    fn mark(self) -> &'static str {
        match self {
            Self::Pending => "[ ]",
            Self::InProgress => "[>]",
            Self::Completed => "[x]",
        }
    }
}

/// One item of the list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Item {
    /// What to do, in the imperative ("Run the tests").
    content: String,
    /// `pending`, `in_progress` (one item at a time) or `completed`.
    status: Status,
    /// The same in present continuous ("Running the tests"), shown while the
    /// item is in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    active_form: Option<String>,
    /// Optional stable id of the item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id: Option<String>,
}

/// Arguments of `todo_write`: only its schema is used, [`validate`] reads
/// the arguments so its errors can name the offending item.
#[derive(JsonSchema)]
#[allow(dead_code)]
struct WriteArgs {
    /// The complete new list, in order (at most 200 items). It replaces the
    /// previous list: include every item you want to keep.
    #[schemars(length(max = 200))]
    todos: Vec<Item>,
}

/// Checks a list against the rules of `todo/updated`, naming the first
/// offending field.
fn validate(args: &Value) -> Result<Vec<Item>, String> {
    let obj = args.as_object().ok_or("arguments must be a JSON object with a `todos` array")?;
    if let Some(extra) = obj.keys().find(|k| k.as_str() != "todos") {
        return Err(format!("unknown argument `{extra}` (the only argument is `todos`)"));
    }
    let list = match obj.get("todos") {
        Some(Value::Array(list)) => list,
        Some(_) => return Err("`todos` must be an array of items".into()),
        None => return Err("missing `todos`: pass the complete list (an empty array clears it)".into()),
    };
    if list.len() > MAX_ITEMS {
        return Err(format!("`todos` has {} items; the limit is {MAX_ITEMS}", list.len()));
    }
    list.iter().enumerate().map(|(i, v)| item(i, v)).collect()
}

fn item(i: usize, v: &Value) -> Result<Item, String> {
    let at = |field: &str| format!("todos[{i}].{field}");
    let obj = v.as_object().ok_or_else(|| format!("todos[{i}] must be an object with `content` and `status`"))?;
    if let Some(extra) = obj.keys().find(|k| !matches!(k.as_str(), "content" | "status" | "active_form" | "id")) {
        return Err(format!("{}: unknown field (fields: content, status, active_form, id)", at(extra)));
    }
    let text = |field: &str, max: usize, required: bool| -> Result<Option<String>, String> {
        match obj.get(field) {
            None | Some(Value::Null) if !required => Ok(None),
            None | Some(Value::Null) => Err(format!("{}: missing", at(field))),
            Some(Value::String(s)) if required && s.trim().is_empty() => Err(format!("{}: empty", at(field))),
            Some(Value::String(s)) if s.chars().count() > max => {
                Err(format!("{}: longer than {max} characters", at(field)))
            }
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("{}: must be a string", at(field))),
        }
    };
    let content = text("content", MAX_TEXT_CHARS, true)?.unwrap_or_default();
    let status = match obj.get("status") {
        Some(Value::String(s)) => Status::parse(s)
            .ok_or_else(|| format!("{}: `{s}` is not one of pending, in_progress, completed", at("status")))?,
        Some(_) => return Err(format!("{}: must be a string", at("status"))),
        None => return Err(format!("{}: missing (pending, in_progress or completed)", at("status"))),
    };
    Ok(Item {
        content,
        status,
        active_form: text("active_form", MAX_TEXT_CHARS, false)?,
        id: text("id", MAX_ID_CHARS, false)?,
    })
}

/// The list as the model reads it back: a summary line, then one line per
/// item.
fn render(items: &[Item]) -> String {
    if items.is_empty() {
        return "Todo list is empty.".to_string();
    }
    let count = |s: Status| items.iter().filter(|i| i.status == s).count();
    let (done, doing, pending) = (count(Status::Completed), count(Status::InProgress), count(Status::Pending));
    let mut out = format!(
        "Todo list ({} item{}: {done} completed, {doing} in progress, {pending} pending):",
        items.len(),
        if items.len() == 1 { "" } else { "s" }
    );
    for item in items {
        let _ = write!(out, "\n{} {}", item.status.mark(), item.content);
        if let Some(id) = &item.id {
            let _ = write!(out, " (id {id})");
        }
    }
    if doing > 1 {
        let _ = write!(out, "\nNote: {doing} items are in progress; keep exactly one in progress at a time.");
    }
    out
}

fn list_key(session_id: &str) -> String {
    format!("todo/list/{session_id}")
}

/// Keeps the list for `todo_read`, dropping the lists of older sessions.
fn store(session_id: &str, items: &[Item]) -> Result<(), wharf_sdk::kv::KvError> {
    let mut index: Vec<String> = wharf_sdk::kv::get_json(INDEX_KEY).unwrap_or_default();
    index.retain(|s| s != session_id);
    index.push(session_id.to_string());
    while index.len() > KEPT_SESSIONS {
        let old = index.remove(0);
        wharf_sdk::kv::delete(&list_key(&old));
    }
    wharf_sdk::kv::set_json(&list_key(session_id), items)?;
    wharf_sdk::kv::set_json(INDEX_KEY, &index)
}

fn write(args: &Args, ctx: &CallContext) -> ToolResult {
    let value = args.value()?;
    let items = validate(&value).map_err(|e| ToolError::invalid_argument(format!("todo list not updated: {e}")))?;
    let data = json!({ "items": items });
    let mut text = render(&items);
    match session::record_event("todo/updated", &data) {
        Ok(()) => {}
        Err(SessionError::NoSession) => {
            text.push_str("\n(Not recorded: no session is attached to this call.)");
        }
        Err(e) => {
            return Err(ToolError::new("SESSION", format!("todo list not updated: {}", session::describe(&e))));
        }
    }
    if !ctx.session_id.is_empty()
        && let Err(e) = store(&ctx.session_id, &items)
    {
        // The event is the record; todo_read just falls back to "unknown".
        wharf_sdk::log::warn!("todo: could not keep the list for todo_read: {e}");
    }
    Ok(ToolOutput::text(text).with_details(&data))
}

fn read(ctx: &CallContext) -> ToolResult {
    if ctx.session_id.is_empty() {
        return Ok(ToolOutput::text("Todo list is empty (no session is attached to this call)."));
    }
    let items: Vec<Item> = wharf_sdk::kv::get_json(&list_key(&ctx.session_id)).unwrap_or_default();
    Ok(ToolOutput::text(render(&items)).with_details(&json!({ "items": items })))
}

struct Todo;

impl ToolPlugin for Todo {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "todo",
            env!("CARGO_PKG_VERSION"),
            "The agent's todo list: todo_write replaces it and records it in the session; todo_read shows it.",
        )
    }

    fn tools() -> Vec<ToolSpec> {
        vec![
            ToolSpec::new::<WriteArgs>(
                "todo_write",
                "Replaces your todo list for this session with `todos` (send the whole list every time). \
                 Use it for tasks with three or more steps, or when the user gives several tasks: write \
                 the plan first, then keep it current. Mark an item `in_progress` before you start it \
                 (exactly one at a time) and `completed` as soon as it is done; add items you discover; \
                 remove ones that no longer apply. Skip it for trivial one-step requests. The user sees \
                 the list.",
                ToolMode::Exclusive,
            ),
            ToolSpec::new::<NoArgs>(
                "todo_read",
                "Returns your current todo list for this session (as last written with todo_write).",
                ToolMode::Parallel,
            ),
        ]
    }

    fn call(name: &str, args: Args, ctx: &CallContext) -> ToolResult {
        match name {
            "todo_write" => write(&args, ctx),
            "todo_read" => read(ctx),
            other => Err(ToolError::unknown_tool(other)),
        }
    }
}

wharf_sdk::export_tool!(Todo);

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use wharf_sdk::session::fake;
    use wharf_sdk::testing;

    fn call(name: &str, args: Value, session: &str) -> ToolResult {
        let mut ctx = testing::context(None);
        ctx.session_id = session.to_string();
        Todo::call(name, Args::new(args.to_string()), &ctx)
    }

    #[test]
    fn write_records_the_whole_list_and_renders_it() {
        testing::reset();
        fake::attach();
        let todos = json!([
            {"content": "Read the spec", "status": "completed", "id": "1"},
            {"content": "Write the code", "status": "in_progress", "active_form": "Writing the code"},
            {"content": "Run the tests", "status": "pending"},
        ]);
        let out = call("todo_write", json!({ "todos": todos }), "s1").unwrap();
        assert_eq!(
            out.content,
            "Todo list (3 items: 1 completed, 1 in progress, 1 pending):\n[x] Read the spec (id 1)\n\
             [>] Write the code\n[ ] Run the tests"
        );
        let events = fake::take();
        assert_eq!(events, vec![("todo/updated".to_string(), json!({ "items": todos }))]);
        let read = call("todo_read", json!({}), "s1").unwrap();
        assert_eq!(read.content, out.content);
        assert_eq!(call("todo_read", json!({}), "other").unwrap().content, "Todo list is empty.");
    }

    #[test]
    fn invalid_lists_are_refused_without_an_event() {
        testing::reset();
        fake::attach();
        let cases = [
            (json!({"todos": [{"content": "x", "status": "done"}]}), "todos[0].status: `done` is not one of"),
            (json!({"todos": [{"content": " ", "status": "pending"}]}), "todos[0].content: empty"),
            (json!({"todos": [{"status": "pending"}]}), "todos[0].content: missing"),
            (json!({"todos": [{"content": "x", "status": "pending", "prio": 1}]}), "todos[0].prio: unknown field"),
            (json!({"todos": "a"}), "`todos` must be an array"),
            (json!({}), "missing `todos`"),
            (json!({"todos": vec![json!({"content": "x", "status": "pending"}); 201]}), "201 items"),
        ];
        for (args, want) in cases {
            let err = call("todo_write", args.clone(), "s").unwrap_err();
            assert_eq!(err.code, "INVALID_ARGUMENT", "{args}");
            assert!(err.message.contains(want), "{args}: {}", err.message);
        }
        assert!(fake::take().is_empty());
    }

    #[test]
    fn without_a_session_the_result_says_so() {
        testing::reset();
        fake::detach();
        let out = call("todo_write", json!({"todos": [{"content": "a", "status": "pending"}]}), "").unwrap();
        assert!(out.content.ends_with("(Not recorded: no session is attached to this call.)"), "{}", out.content);
    }

    #[test]
    fn several_in_progress_items_get_a_note_and_old_sessions_are_dropped() {
        testing::reset();
        fake::attach();
        let two =
            json!({"todos": [{"content": "a", "status": "in_progress"}, {"content": "b", "status": "in_progress"}]});
        let out = call("todo_write", two, "s0").unwrap();
        assert!(out.content.contains("keep exactly one in progress"), "{}", out.content);
        for i in 1..=KEPT_SESSIONS {
            call("todo_write", json!({"todos": []}), &format!("s{i}")).unwrap();
        }
        assert_eq!(wharf_sdk::kv::get(&list_key("s0")), None);
        assert!(wharf_sdk::kv::get(&list_key("s1")).is_some());
        assert_eq!(wharf_sdk::kv::list_keys("todo/list/").len(), KEPT_SESSIONS);
    }
}
