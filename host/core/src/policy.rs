//! Composition of permission decisions.
//!
//! Every policy in the registry snapshot evaluates the same call (concurrently,
//! each bounded by a timeout); [`compose`] folds their votes into one verdict
//! with a single, order-independent precedence:
//!
//! 1. **deny** wins if any policy denies — and a policy that fails or times out
//!    counts as a deny (fail closed). The reason lists every denier in profile
//!    order.
//! 2. else **ask** if any policy asks (reasons joined likewise);
//! 3. else **allow**. Independently of 2 and 3, **rewrites** are applied to the
//!    arguments in profile order: each rewrite contributes the top-level keys
//!    it changed or removed relative to the original arguments, so two policies
//!    editing different keys both take effect, and on the same key the later
//!    policy in profile order wins. (A non-object rewrite replaces the whole
//!    value.) Under `ask`, the rewritten arguments are what the human approves.
//!
//! Votes are sorted by their profile index before folding, so the result never
//! depends on the order in which evaluations finished (a property test checks
//! this).

use serde_json::Value;

use crate::events::{PolicyVote, Verdict};
use crate::plugin::{Decision, PluginError, PluginRef};

/// One policy's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Vote {
    /// Position of the policy in profile order.
    pub index: usize,
    /// Which plugin version answered.
    pub plugin: PluginRef,
    /// The decision, or why the policy failed.
    pub result: Result<Decision, PluginError>,
}

impl Vote {
    /// The vote as logged in `policy/decision`.
    pub fn to_logged(&self, source: &str) -> PolicyVote {
        PolicyVote {
            source: source.to_string(),
            plugin: self.plugin.id.clone(),
            version: self.plugin.digest.clone(),
            config: self.plugin.config.clone(),
            decision: self.result.as_ref().ok().cloned(),
            error: self.result.as_ref().err().map(ToString::to_string),
        }
    }
}

/// The folded result.
#[derive(Debug, Clone, PartialEq)]
pub struct Composed {
    /// Allow, deny or ask.
    pub verdict: Verdict,
    /// Arguments after rewrites (the original when none).
    pub arguments: Value,
    /// Whether any rewrite changed the arguments.
    pub rewritten: bool,
}

/// Folds votes (see the module docs for the precedence).
pub fn compose(original: &Value, votes: &[Vote]) -> Composed {
    let mut sorted: Vec<&Vote> = votes.iter().collect();
    sorted.sort_by(|a, b| a.index.cmp(&b.index).then_with(|| a.plugin.id.cmp(&b.plugin.id)));
    let mut denies = Vec::new();
    let mut asks = Vec::new();
    let mut args = original.clone();
    for v in &sorted {
        match &v.result {
            Err(e) => denies.push(format!("{}: policy failed ({e}); failing closed", v.plugin.id)),
            Ok(Decision::Deny { reason }) => denies.push(format!("{}: {reason}", v.plugin.id)),
            Ok(Decision::Ask { reason }) => asks.push(format!("{}: {reason}", v.plugin.id)),
            Ok(Decision::Rewrite { args: new }) => apply_rewrite(original, &mut args, new),
            Ok(Decision::Allow) => {}
        }
    }
    let verdict = if !denies.is_empty() {
        Verdict::Deny { reason: denies.join("; ") }
    } else if !asks.is_empty() {
        Verdict::Ask { reason: asks.join("; ") }
    } else {
        Verdict::Allow
    };
    let rewritten = &args != original;
    Composed { verdict, arguments: args, rewritten }
}

fn apply_rewrite(original: &Value, args: &mut Value, new: &Value) {
    match (original, new, &mut *args) {
        (Value::Object(orig), Value::Object(new), Value::Object(out)) => {
            for (k, v) in new {
                if orig.get(k) != Some(v) {
                    out.insert(k.clone(), v.clone());
                }
            }
            for k in orig.keys() {
                if !new.contains_key(k) {
                    out.remove(k);
                }
            }
        }
        _ => *args = new.clone(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn vote(index: usize, result: Result<Decision, PluginError>) -> Vote {
        Vote { index, plugin: PluginRef::native(&format!("p{index}")), result }
    }

    #[test]
    fn precedence_deny_then_ask_then_rewrite_then_allow() {
        let orig = json!({"a": 1, "b": 2});
        let allow = vote(0, Ok(Decision::Allow));
        let ask = vote(1, Ok(Decision::Ask { reason: "sure?".into() }));
        let deny = vote(2, Ok(Decision::Deny { reason: "no".into() }));
        let failed = vote(3, Err("trap".into()));
        let rw = vote(4, Ok(Decision::Rewrite { args: json!({"a": 9, "b": 2}) }));

        let c = compose(&orig, &[allow.clone(), ask.clone(), deny.clone(), rw.clone()]);
        assert_eq!(c.verdict, Verdict::Deny { reason: "p2: no".into() });
        let c = compose(&orig, &[allow.clone(), failed]);
        assert_eq!(c.verdict, Verdict::Deny { reason: "p3: policy failed (trap); failing closed".into() });
        let c = compose(&orig, &[allow.clone(), ask, rw.clone()]);
        assert_eq!(c.verdict, Verdict::Ask { reason: "p1: sure?".into() });
        assert_eq!(c.arguments, json!({"a": 9, "b": 2}));
        let c = compose(&orig, &[allow.clone(), rw]);
        assert_eq!((c.verdict, c.rewritten), (Verdict::Allow, true));
        let c = compose(&orig, &[allow]);
        assert_eq!((c.verdict, c.arguments, c.rewritten), (Verdict::Allow, orig.clone(), false));
        assert_eq!(compose(&orig, &[]).verdict, Verdict::Allow);
    }

    #[test]
    fn a_logged_vote_names_the_config_that_decided() {
        let plugin = PluginRef { id: "p".into(), digest: "d".into(), config: Some("c1".into()) };
        let v = Vote { index: 0, plugin, result: Ok(Decision::Allow) };
        let logged = v.to_logged("policy");
        assert_eq!((logged.version.as_str(), logged.config.as_deref()), ("d", Some("c1")));
        let wire = serde_json::to_value(&logged).unwrap();
        assert_eq!(wire["config"], "c1");
        // Native participants have no config: the key is left out.
        let native = vote(1, Ok(Decision::Allow)).to_logged("hook");
        assert!(serde_json::to_value(&native).unwrap().get("config").is_none());
    }

    #[test]
    fn rewrites_merge_changed_keys_in_profile_order() {
        let orig = json!({"a": 1, "b": 2, "c": 3});
        let r1 = vote(0, Ok(Decision::Rewrite { args: json!({"a": 10, "b": 2, "c": 3}) }));
        let r2 = vote(1, Ok(Decision::Rewrite { args: json!({"a": 1, "b": 20}) })); // also drops c
        let r3 = vote(2, Ok(Decision::Rewrite { args: json!({"a": 30, "b": 2, "c": 3}) }));
        let c = compose(&orig, &[r3.clone(), r1.clone(), r2.clone()]);
        assert_eq!(c.arguments, json!({"a": 30, "b": 20}));
        let c = compose(&orig, &[r1, r2]);
        assert_eq!(c.arguments, json!({"a": 10, "b": 20}));
    }

    fn decision() -> impl Strategy<Value = Result<Decision, PluginError>> {
        prop_oneof![
            Just(Ok(Decision::Allow)),
            "[a-c]{1,3}".prop_map(|r| Ok(Decision::Deny { reason: r })),
            "[a-c]{1,3}".prop_map(|r| Ok(Decision::Ask { reason: r })),
            (0i64..3, 0i64..3).prop_map(|(a, b)| Ok(Decision::Rewrite { args: json!({"a": a, "b": b}) })),
            (0i64..3).prop_map(|a| Ok(Decision::Rewrite { args: json!({"a": a}) })),
            "[x-z]{1,2}".prop_map(|e| Err(PluginError::Answer(e))),
        ]
    }

    proptest! {
        #[test]
        fn composition_is_independent_of_vote_order(
            decisions in prop::collection::vec(decision(), 0..8),
            perm_seed in any::<u64>(),
        ) {
            let orig = json!({"a": 1, "b": 1});
            let votes: Vec<Vote> = decisions.into_iter().enumerate().map(|(i, d)| vote(i, d)).collect();
            let mut shuffled = votes.clone();
            // Deterministic Fisher–Yates from the seed.
            let mut s = perm_seed;
            for i in (1..shuffled.len()).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                shuffled.swap(i, (s >> 33) as usize % (i + 1));
            }
            let a = compose(&orig, &votes);
            let b = compose(&orig, &shuffled);
            prop_assert_eq!(&a, &b);
            // The precedence itself.
            let any_deny = votes.iter().any(|v| matches!(v.result, Err(_) | Ok(Decision::Deny { .. })));
            let any_ask = votes.iter().any(|v| matches!(v.result, Ok(Decision::Ask { .. })));
            match a.verdict {
                Verdict::Deny { .. } => prop_assert!(any_deny),
                Verdict::Ask { .. } => prop_assert!(!any_deny && any_ask),
                Verdict::Allow => prop_assert!(!any_deny && !any_ask),
            }
        }
    }
}
