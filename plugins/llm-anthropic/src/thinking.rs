//! Thinking blocks kept for the next request.
//!
//! The Messages API wants an assistant turn's thinking blocks back, with
//! their `signature` byte-identical (and `redacted_thinking` blocks with
//! their `data`), when the conversation continues after that turn's
//! `tool_use`. The WIT `message` carries only the reasoning *text*, and no
//! surface should ever see a signature, so the adapter keeps the blocks in
//! its private `kv` store (kept by the host across calls and versions of
//! the plugin, not across processes): keyed by a hash of the turn's
//! reasoning text and tool-call ids, checked against the full text on
//! lookup. A turn whose blocks are unknown (another process, evicted) is
//! sent without them; see `request` for what that does to thinking.

use serde::{Deserialize, Serialize};

/// Longest signature kept, bytes.
pub const MAX_SIGNATURE_BYTES: usize = 16 << 10;
/// Largest record (all blocks of one turn) kept, bytes.
pub const MAX_RECORD_BYTES: usize = 512 << 10;
/// Most turns kept; the oldest is evicted first.
pub const MAX_TURNS: usize = 256;

const ORDER_KEY: &str = "thinking-order";

/// One block to send back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    /// Visible thinking and its signature.
    Thinking {
        /// The text, as streamed.
        thinking: String,
        /// The opaque signature, as streamed.
        signature: String,
    },
    /// Encrypted thinking.
    RedactedThinking {
        /// The opaque payload.
        data: String,
    },
}

/// One assistant turn's blocks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The reasoning text the host was given for the turn (checked on lookup).
    pub reasoning: String,
    /// The turn's tool-call ids.
    pub tool_ids: Vec<String>,
    /// The blocks, in order.
    pub blocks: Vec<Block>,
}

/// FNV-1a, 64 bits: a key, not a MAC (the record is compared in full).
fn fnv(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain([0u8]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The kv key of a turn.
pub fn key(reasoning: &str, tool_ids: &[String]) -> String {
    let mut parts: Vec<&str> = vec![reasoning];
    parts.extend(tool_ids.iter().map(String::as_str));
    format!("thinking/{:016x}", fnv(&parts))
}

/// Stores `record` (nothing when it has no blocks or is too large).
pub fn save(record: &Record) {
    if record.blocks.is_empty() {
        return;
    }
    let Ok(bytes) = serde_json::to_vec(record) else { return };
    if bytes.len() > MAX_RECORD_BYTES {
        wharf_sdk::log::warn!(
            "llm-anthropic: thinking blocks of {} bytes not kept (max {MAX_RECORD_BYTES})",
            bytes.len()
        );
        return;
    }
    let k = key(&record.reasoning, &record.tool_ids);
    let mut order: Vec<String> = wharf_sdk::kv::get_json(ORDER_KEY).unwrap_or_default();
    order.retain(|o| *o != k);
    order.push(k.clone());
    while order.len() > MAX_TURNS {
        let old = order.remove(0);
        wharf_sdk::kv::delete(&old);
    }
    loop {
        match wharf_sdk::kv::set(&k, &bytes) {
            Ok(()) => break,
            // Over quota: make room by dropping the oldest turn.
            Err(e) if order.len() > 1 => {
                wharf_sdk::log::debug!("llm-anthropic: kv: {}; evicting the oldest turn", e.message);
                let old = order.remove(0);
                wharf_sdk::kv::delete(&old);
            }
            Err(e) => {
                wharf_sdk::log::warn!("llm-anthropic: thinking blocks not kept: {}", e.message);
                order.retain(|o| *o != k);
                break;
            }
        }
    }
    if let Err(e) = wharf_sdk::kv::set_json(ORDER_KEY, &order) {
        wharf_sdk::log::warn!("llm-anthropic: kv: {}", e.message);
    }
}

/// The blocks of the turn with this reasoning and these tool calls, if kept.
pub fn load(reasoning: &str, tool_ids: &[String]) -> Option<Vec<Block>> {
    let bytes = wharf_sdk::kv::get(&key(reasoning, tool_ids))?;
    let record: Record = serde_json::from_slice(&bytes).ok()?;
    (record.reasoning == reasoning && record.tool_ids == tool_ids).then_some(record.blocks)
}
