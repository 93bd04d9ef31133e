//! The event bus: dispatches a hook point to its listeners.
//!
//! Listeners come from two places, merged by priority (lower first; at equal
//! priority plugin listeners keep registry order and run before native ones):
//!
//! - the registry [`Snapshot`] passed to each dispatch: plugin hooks, which
//!   disappear when their plugin version is revoked or replaced;
//! - native listeners registered on the bus for host-internal work, each
//!   revocable through its [`ListenerHandle`].
//!
//! Modes:
//!
//! | mode | use | listener `Err` / timeout |
//! |---|---|---|
//! | [`Bus::emit`] | observe; results ignored | logged |
//! | [`Bus::waterfall`] | in order; `Replace` rewrites the payload, `Reject` stops | logged, payload unchanged; at `tools/pre-execute` it **rejects** (fail closed) |
//! | [`Bus::serial`] | in order; the first `Reject` is an objection and stops | logged, counts as pass |
//! | [`Bus::parallel`] | all at once, awaited together | returned (and logged) |
//!
//! Each listener call is bounded by [`Bus::timeout`] (default 30 s); a timeout
//! counts as an `Err`. Payload shapes per hook point are documented where the
//! core dispatches them ([`crate::agent`], [`crate::pipeline`]).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use serde_json::Value;

use crate::plugin::{BoxFuture, Hook, HookOutcome, HookPoint, PluginError, PluginRef, ToolErrorCode};
use crate::registry::Snapshot;

/// Default per-listener timeout.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(30);

struct NativeEntry {
    id: u64,
    point: HookPoint,
    priority: i32,
    hook: Arc<dyn Hook>,
}

type Natives = RwLock<Vec<NativeEntry>>;

/// Dispatches hook points to plugin and native listeners.
pub struct Bus {
    natives: Arc<Natives>,
    next_id: AtomicU64,
    timeout: Duration,
}

impl Default for Bus {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Bus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bus").field("timeout", &self.timeout).finish_non_exhaustive()
    }
}

/// Revokes a native listener. Dropping the handle does **not** revoke (so a
/// listener can live as long as the bus); call [`ListenerHandle::revoke`].
#[must_use = "keep the handle to revoke the listener later"]
#[derive(Debug)]
pub struct ListenerHandle {
    id: u64,
    natives: Weak<Natives>,
}

impl ListenerHandle {
    /// Removes the listener. Dispatches already running may still call it.
    pub fn revoke(self) {
        if let Some(n) = self.natives.upgrade() {
            n.write().unwrap_or_else(|e| e.into_inner()).retain(|e| e.id != self.id);
        }
    }
}

/// One listener's answer, for callers that log who said what.
#[derive(Debug, Clone, PartialEq)]
pub struct HookTrace {
    /// Who answered.
    pub plugin: PluginRef,
    /// What it answered (`Err` for failures and timeouts).
    pub result: Result<HookOutcome, PluginError>,
}

/// A listener that stopped a waterfall or objected in a serial dispatch.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    /// Who.
    pub by: PluginRef,
    /// Why.
    pub reason: String,
}

/// Result of a waterfall dispatch.
#[derive(Debug, Clone, PartialEq)]
pub struct Waterfall {
    /// The payload after every `Replace` up to the end (or the rejection).
    pub payload: Value,
    /// Set when a listener rejected (or failed at a fail-closed point).
    pub rejected: Option<Rejection>,
    /// Every listener's answer, in call order.
    pub trace: Vec<HookTrace>,
}

struct FnHook<F> {
    plugin: PluginRef,
    subs: Vec<(HookPoint, i32)>,
    f: F,
}

impl<F, Fut> Hook for FnHook<F>
where
    F: Fn(HookPoint, Value) -> Fut + Send + Sync,
    Fut: Future<Output = Result<HookOutcome, PluginError>> + Send + 'static,
{
    fn plugin(&self) -> &PluginRef {
        &self.plugin
    }
    fn subscriptions(&self) -> &[(HookPoint, i32)] {
        &self.subs
    }
    fn handle(&self, point: HookPoint, payload: Value) -> BoxFuture<'_, Result<HookOutcome, PluginError>> {
        Box::pin((self.f)(point, payload))
    }
}

impl Bus {
    /// A bus with no native listeners and the default timeout.
    pub fn new() -> Self {
        Self { natives: Arc::default(), next_id: AtomicU64::new(1), timeout: DEFAULT_HOOK_TIMEOUT }
    }

    /// Sets the per-listener timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The per-listener timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Registers a native listener for every point it subscribes to.
    pub fn register(&self, hook: Arc<dyn Hook>) -> ListenerHandle {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut natives = self.natives.write().unwrap_or_else(|e| e.into_inner());
        for (point, priority) in hook.subscriptions() {
            natives.push(NativeEntry { id, point: *point, priority: *priority, hook: hook.clone() });
        }
        ListenerHandle { id, natives: Arc::downgrade(&self.natives) }
    }

    /// Registers a closure as a native listener of one point.
    pub fn on<F, Fut>(&self, point: HookPoint, priority: i32, f: F) -> ListenerHandle
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<HookOutcome, PluginError>> + Send + 'static,
    {
        self.register(Arc::new(FnHook {
            plugin: PluginRef::native("host"),
            subs: vec![(point, priority)],
            f: move |_, v| f(v),
        }))
    }

    /// Whether anything listens at `point`.
    pub fn has_listeners(&self, snap: &Snapshot, point: HookPoint) -> bool {
        snap.hooks.get(&point).is_some_and(|v| !v.is_empty())
            || self.natives.read().unwrap_or_else(|e| e.into_inner()).iter().any(|e| e.point == point)
    }

    /// The listeners of `point`, in call order.
    pub fn listeners(&self, snap: &Snapshot, point: HookPoint) -> Vec<Arc<dyn Hook>> {
        let mut all: Vec<(i32, Arc<dyn Hook>)> = Vec::new();
        for h in snap.hooks.get(&point).into_iter().flatten() {
            let prio = h.subscriptions().iter().find(|(p, _)| *p == point).map(|(_, pr)| *pr).unwrap_or(0);
            all.push((prio, h.clone()));
        }
        for e in self.natives.read().unwrap_or_else(|e| e.into_inner()).iter().filter(|e| e.point == point) {
            all.push((e.priority, e.hook.clone()));
        }
        all.sort_by_key(|(p, _)| *p); // stable: plugins before natives on ties
        all.into_iter().map(|(_, h)| h).collect()
    }

    async fn call(&self, h: &Arc<dyn Hook>, point: HookPoint, payload: Value) -> Result<HookOutcome, PluginError> {
        let r = match tokio::time::timeout(self.timeout, h.handle(point, payload)).await {
            Ok(r) => r,
            Err(_) => Err(PluginError::failed(
                ToolErrorCode::Timeout,
                format!("timed out after {} ms", self.timeout.as_millis()),
            )),
        };
        if let Err(e) = &r {
            tracing::warn!(plugin = %h.plugin().id, point = ?point, error = %e, "hook listener failed");
        }
        r
    }

    /// Observe-only dispatch: every listener in order, answers ignored.
    pub async fn emit(&self, snap: &Snapshot, point: HookPoint, payload: &Value) {
        for h in self.listeners(snap, point) {
            let _ = self.call(&h, point, payload.clone()).await;
        }
    }

    /// Waterfall dispatch (see the module docs for error handling).
    pub async fn waterfall(&self, snap: &Snapshot, point: HookPoint, payload: Value) -> Waterfall {
        let fail_closed = point == HookPoint::ToolsPreExecute;
        let mut out = Waterfall { payload, rejected: None, trace: vec![] };
        for h in self.listeners(snap, point) {
            let r = self.call(&h, point, out.payload.clone()).await;
            out.trace.push(HookTrace { plugin: h.plugin().clone(), result: r.clone() });
            match r {
                Ok(HookOutcome::Pass) => {}
                Ok(HookOutcome::Replace(v)) => out.payload = v,
                Ok(HookOutcome::Reject(reason)) => {
                    out.rejected = Some(Rejection { by: h.plugin().clone(), reason });
                    break;
                }
                Err(e) if fail_closed => {
                    out.rejected = Some(Rejection { by: h.plugin().clone(), reason: format!("hook failed: {e}") });
                    break;
                }
                Err(_) => {}
            }
        }
        out
    }

    /// Serial dispatch: in order until the first objection (`Reject`).
    pub async fn serial(&self, snap: &Snapshot, point: HookPoint, payload: &Value) -> Option<Rejection> {
        for h in self.listeners(snap, point) {
            if let Ok(HookOutcome::Reject(reason)) = self.call(&h, point, payload.clone()).await {
                return Some(Rejection { by: h.plugin().clone(), reason });
            }
        }
        None
    }

    /// Parallel dispatch: every listener at once; answers in listener order.
    pub async fn parallel(&self, snap: &Snapshot, point: HookPoint, payload: &Value) -> Vec<HookTrace> {
        let listeners = self.listeners(snap, point);
        let mut set = tokio::task::JoinSet::new();
        for (i, h) in listeners.iter().enumerate() {
            let (h, payload, timeout) = (h.clone(), payload.clone(), self.timeout);
            set.spawn(async move {
                let r = match tokio::time::timeout(timeout, h.handle(point, payload)).await {
                    Ok(r) => r,
                    Err(_) => Err(PluginError::failed(
                        ToolErrorCode::Timeout,
                        format!("timed out after {} ms", timeout.as_millis()),
                    )),
                };
                (i, r)
            });
        }
        let mut results: Vec<Option<Result<HookOutcome, PluginError>>> = vec![None; listeners.len()];
        while let Some(joined) = set.join_next().await {
            if let Ok((i, r)) = joined {
                results[i] = Some(r);
            }
        }
        listeners
            .iter()
            .zip(results)
            .map(|(h, r)| {
                let result =
                    r.unwrap_or_else(|| Err(PluginError::failed(ToolErrorCode::HostPanic, "listener panicked")));
                if let Err(e) = &result {
                    tracing::warn!(plugin = %h.plugin().id, point = ?point, error = %e, "hook listener failed");
                }
                HookTrace { plugin: h.plugin().clone(), result }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::registry::{Registrations, Registry};
    use serde_json::json;

    struct PluginHook {
        plugin: PluginRef,
        subs: Vec<(HookPoint, i32)>,
        answer: Result<HookOutcome, PluginError>,
    }

    impl Hook for PluginHook {
        fn plugin(&self) -> &PluginRef {
            &self.plugin
        }
        fn subscriptions(&self) -> &[(HookPoint, i32)] {
            &self.subs
        }
        fn handle(&self, _: HookPoint, _: Value) -> BoxFuture<'_, Result<HookOutcome, PluginError>> {
            let a = self.answer.clone();
            Box::pin(async move { a })
        }
    }

    fn install(reg: &Registry, id: &str, point: HookPoint, prio: i32, answer: Result<HookOutcome, PluginError>) {
        let plugin = PluginRef::native(id);
        let hook = Arc::new(PluginHook { plugin: plugin.clone(), subs: vec![(point, prio)], answer });
        reg.install(plugin, Registrations { hooks: Some(hook), ..Default::default() }).unwrap();
    }

    #[tokio::test]
    async fn waterfall_orders_by_priority_and_replaces() {
        let bus = Bus::new();
        let reg = Registry::new();
        install(&reg, "p10", HookPoint::SystemPrompt, 10, Ok(HookOutcome::Replace(json!("from p10"))));
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let s = seen.clone();
        let h = bus.on(HookPoint::SystemPrompt, 5, move |v| {
            s.lock().unwrap().push(v);
            async { Ok(HookOutcome::Replace(json!("from native"))) }
        });
        let w = bus.waterfall(&reg.snapshot(), HookPoint::SystemPrompt, json!("start")).await;
        assert_eq!(w.payload, json!("from p10"));
        assert_eq!(*seen.lock().unwrap(), vec![json!("start")]);
        assert_eq!(w.trace.len(), 2);
        h.revoke();
        let w = bus.waterfall(&reg.snapshot(), HookPoint::SystemPrompt, json!("start")).await;
        assert_eq!(w.trace.len(), 1);
        // Revoking the plugin removes its listener too.
        reg.revoke("p10");
        assert!(!bus.has_listeners(&reg.snapshot(), HookPoint::SystemPrompt));
    }

    #[tokio::test]
    async fn waterfall_errors_pass_except_pre_execute() {
        let bus = Bus::new();
        let reg = Registry::new();
        install(&reg, "bad", HookPoint::SystemPrompt, 0, Err("boom".into()));
        install(&reg, "bad2", HookPoint::ToolsPreExecute, 0, Err("boom".into()));
        let w = bus.waterfall(&reg.snapshot(), HookPoint::SystemPrompt, json!(1)).await;
        assert!(w.rejected.is_none());
        assert_eq!(w.payload, json!(1));
        let w = bus.waterfall(&reg.snapshot(), HookPoint::ToolsPreExecute, json!(1)).await;
        assert_eq!(w.rejected.unwrap().reason, "hook failed: boom");
    }

    #[tokio::test]
    async fn reject_stops_waterfall_and_serial() {
        let bus = Bus::new();
        let reg = Registry::new();
        install(&reg, "a", HookPoint::AgentTurnStopping, 0, Ok(HookOutcome::Reject("not yet".into())));
        let called = Arc::new(AtomicU64::new(0));
        let c = called.clone();
        let _h = bus.on(HookPoint::AgentTurnStopping, 1, move |_| {
            c.fetch_add(1, Ordering::SeqCst);
            async { Ok(HookOutcome::Pass) }
        });
        let r = bus.serial(&reg.snapshot(), HookPoint::AgentTurnStopping, &json!({})).await;
        assert_eq!(r.unwrap().by.id, "a");
        assert_eq!(called.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn parallel_and_emit_call_everyone() {
        let bus = Bus::new().with_timeout(Duration::from_secs(5));
        let reg = Registry::new();
        install(&reg, "a", HookPoint::ToolsResult, 0, Ok(HookOutcome::Pass));
        install(&reg, "b", HookPoint::ToolsResult, 0, Err("x".into()));
        let n = Arc::new(AtomicU64::new(0));
        let c = n.clone();
        let _h = bus.on(HookPoint::ToolsResult, 0, move |_| {
            c.fetch_add(1, Ordering::SeqCst);
            async { Ok(HookOutcome::Pass) }
        });
        let traces = bus.parallel(&reg.snapshot(), HookPoint::ToolsResult, &json!({})).await;
        let ids: Vec<&str> = traces.iter().map(|t| t.plugin.id.as_str()).collect();
        assert_eq!(ids, vec!["a", "b", "host"]);
        assert!(traces[1].result.is_err());
        bus.emit(&reg.snapshot(), HookPoint::ToolsResult, &json!({})).await;
        assert_eq!(n.load(Ordering::SeqCst), 2);
    }
}
