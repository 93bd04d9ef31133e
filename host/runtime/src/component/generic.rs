//! Generic components: a component that exports plain WIT functions and no
//! `wharf:plugin` interface loads as a tool plugin whose tools are its
//! exported functions.
//!
//! A child module of `component` (it shares the sandbox: [`super::sandboxed`],
//! the store set-up, the limits and the output checks of every other call).
//!
//! - **Which functions.** Every function the component exports, at the top
//!   level or inside an exported instance (interface), nested instances
//!   included. Exports of `wasi:` packages (`wasi:cli/run`,
//!   `wasi:http/incoming-handler`) are not tools, nor is componentize-py's
//!   build-time `exports.init` (matched by its exact type:
//!   [`is_componentize_py_init`]); a component with nothing else is not a
//!   plugin at all.
//! - **Names.** The interface's name (for `example:types/kinds@0.1.0`,
//!   `kinds`) and the function's, joined by `_`, kebab-case turned to
//!   snake_case: `kinds.next-char` → `kinds_next_char`; a top-level function
//!   keeps its own name (`greet`). When functions map to one name, those
//!   (and only those) of an `ns:pkg/iface@ver` export are qualified, one
//!   step at a time until the names differ: the package
//!   (`tp:generic/alpha` → `generic_alpha_greet`), then the namespace
//!   (`tp_generic_alpha_greet`), then the version
//!   (`tp_generic_alpha_v1_0_0_greet`); a qualified function is shown by
//!   its export's full name (`tp:generic/alpha.greet`) and gets no docs.
//!   Names that still collide, a name over 64 bytes, more functions than
//!   the runtime's tool bound ([`super::Runtime::set_max_tools`]), or a
//!   function that takes or returns a resource (named, with every function
//!   using it), an error-context, or a stream or future anywhere but as its
//!   whole result refuse the whole component at load, with the function
//!   (and parameter) named.
//! - **Schemas and values.** [`crate::wit_json`].
//! - **Descriptions.** The function's doc comment when the component carries
//!   its WIT docs (a `package-docs` custom section, at its top level or in
//!   one of its core modules: [`read_docs`]), then its WIT signature; a
//!   function without docs gets the signature alone.
//! - **Grants.** A generic component cannot ask for anything, so it gets
//!   exactly what its row grants (`dirs` with their access, `hosts`, `env`,
//!   `process`) and nothing by default; limits as for any plugin.
//! - **Calls.** A fresh instance per call (the row's `warm` is ignored),
//!   through wasmtime's dynamic API ([`Func::call_async`] with [`Val`]s). A
//!   top-level `result`'s `err` is a tool error (`TOOL_ERROR`, the message
//!   the error's string, or its JSON); any other result is the tool's
//!   output, as JSON text.
//! - **Async functions, streams and futures** (WASI 0.3): an `async`
//!   function, or one whose result is a `stream<u8>`, `stream<string>`,
//!   `stream<list<u8>>` or `future<T>` ([`Delivery`]), is called inside the
//!   store's event loop (`component/streams.rs`): a stream's text is reported as
//!   progress while the call runs and is the output; a future's value is
//!   converted like a returned one.

use std::collections::HashMap;
use std::path::Path;

use wasmtime::component::types::{ComponentFunc, ComponentItem};
use wasmtime::component::{Component, ComponentExportIndex, Func, ResourceType, Type, Val};
use wharf_core::plugin::ToolErrorCode;

use super::{
    CallContext, CallError, Indices, MAX_TOOL_DESCRIPTION, MAX_TOOL_SCHEMA, MAX_TOOL_SPECS_TOTAL, MAX_TOOLS_SETTING,
    PluginInfo, PluginVersion, classify_error, parse_name,
};
use crate::bindings::wharf::plugin::types as wt;
use crate::error::LoadError;
use crate::grants::{FsRequest, Grant, GrantRequest};
use crate::wit_json::{self, WitType};

/// Longest tool name.
const MAX_TOOL_NAME: usize = 64;
/// Most functions named in one load refusal.
const MAX_REFUSALS_SHOWN: usize = 3;

/// One exported function, as a tool.
#[derive(Debug, Clone)]
pub struct GenericFunction {
    /// The tool's name (`kinds_add`).
    pub tool: String,
    /// The function as written in WIT terms (`kinds.add`, `greet`).
    pub display: String,
    /// Parameters, in order.
    pub params: Vec<(String, WitType)>,
    /// Result type, if any: a returned value's, or the payload of a
    /// `future` result (see [`Self::delivery`]); `None` for a stream.
    pub result: Option<WitType>,
    /// How the result reaches the caller.
    pub delivery: Delivery,
    /// An `async` function (the component model's async ABI).
    pub is_async: bool,
    /// The doc comment, when the component carries its WIT docs.
    pub docs: Option<String>,
    index: ComponentExportIndex,
    /// The qualified forms of the name, in the order a collision uses them
    /// (empty outside an `ns:pkg/iface` export), with how each is shown.
    qualified: Vec<String>,
    qualified_display: String,
}

/// How a function's result reaches the tool's caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Returned (when the call ends, for an `async` function too).
    Value,
    /// A `stream<…>`: read while the call runs, each delta reported as
    /// progress; the whole text is the output.
    Stream(StreamItem),
    /// A `future<T>`: awaited; its value is the output.
    Future,
}

/// What a streamed result's items are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamItem {
    /// `stream<u8>`: bytes of text.
    Bytes,
    /// `stream<string>`: pieces of text.
    Text,
    /// `stream<list<u8>>`: chunks of bytes of text.
    Chunks,
}

impl StreamItem {
    /// The item type in WIT.
    pub fn wit(self) -> &'static str {
        match self {
            Self::Bytes => "u8",
            Self::Text => "string",
            Self::Chunks => "list<u8>",
        }
    }
}

impl GenericFunction {
    /// The WIT signature: `func(a: s32, b: s32) -> s32`, `async func(n:
    /// u32) -> stream<u8>`.
    pub fn signature(&self) -> String {
        let params: Vec<String> = self.params.iter().map(|(n, t)| format!("{n}: {}", t.wit())).collect();
        let kw = if self.is_async { "async func" } else { "func" };
        let ret = match (self.delivery, &self.result) {
            (Delivery::Stream(i), _) => Some(format!("stream<{}>", i.wit())),
            (Delivery::Future, Some(t)) => Some(format!("future<{}>", t.wit())),
            (Delivery::Future, None) => Some("future".to_string()),
            (Delivery::Value, r) => r.as_ref().map(WitType::wit),
        };
        match ret {
            Some(r) => format!("{kw}({}) -> {r}", params.join(", ")),
            None => format!("{kw}({})", params.join(", ")),
        }
    }

    /// Where the function is among the component's exports.
    pub(super) fn index(&self) -> ComponentExportIndex {
        self.index
    }

    /// The tool description: the doc comment (if any), then the signature.
    pub fn description(&self) -> String {
        let sig = format!("WIT: `{}: {}`", self.display, self.signature());
        let mut out = match &self.docs {
            Some(d) if !d.trim().is_empty() => format!("{}\n\n{sig}", d.trim()),
            _ => sig,
        };
        if wharf_core::util::truncate_str(&mut out, MAX_TOOL_DESCRIPTION - 3) {
            out.push('…');
        }
        out
    }
}

/// What a generic component exports.
#[derive(Debug, Clone)]
pub struct GenericExports {
    /// The functions, as tools, in export order.
    pub functions: Vec<GenericFunction>,
    /// The package of the first exported interface (`example:types`), if any.
    pub package: Option<String>,
    /// Its version (`0.1.0`), if any.
    pub version: Option<String>,
}

/// A kebab-case WIT name as a tool-name part.
fn snake(name: &str) -> String {
    name.replace('-', "_")
}

/// `[method]counter.bump` → `counter.bump`, `[constructor]counter` →
/// `counter.constructor`, for messages.
fn readable(name: &str) -> String {
    if let Some(r) = name.strip_prefix("[constructor]") {
        return format!("{r}.constructor");
    }
    for p in ["[method]", "[static]", "[async method]", "[async static]", "[async]"] {
        if let Some(r) = name.strip_prefix(p) {
            return r.to_string();
        }
    }
    name.to_string()
}

/// Why a function cannot be a tool.
enum Refusal {
    /// It takes or returns a resource: `user` is the function and where
    /// (`counters.peek` (parameter `c`)).
    Resource { resource: ResourceType, user: String },
    /// Anything else, as a sentence.
    Other(String),
}

/// The first resource type inside `ty`, if any.
fn resource_in(ty: &Type) -> Option<ResourceType> {
    match ty {
        Type::Own(r) | Type::Borrow(r) => Some(*r),
        Type::List(l) => resource_in(&l.ty()),
        Type::FixedLengthList(l) => resource_in(&l.ty()),
        Type::Map(m) => resource_in(&m.key()).or_else(|| resource_in(&m.value())),
        Type::Record(r) => r.fields().find_map(|f| resource_in(&f.ty)),
        Type::Tuple(t) => t.types().find_map(|t| resource_in(&t)),
        Type::Variant(v) => v.cases().find_map(|c| c.ty.as_ref().and_then(resource_in)),
        Type::Option(o) => resource_in(&o.ty()),
        Type::Result(r) => r.ok().as_ref().and_then(resource_in).or_else(|| r.err().as_ref().and_then(resource_in)),
        Type::Future(f) => f.ty().as_ref().and_then(resource_in),
        Type::Stream(s) => s.ty().as_ref().and_then(resource_in),
        _ => None,
    }
}

struct Walk<'a> {
    engine: &'a wasmtime::Engine,
    component: &'a Component,
    found: Vec<GenericFunction>,
    refused: Vec<Refusal>,
    /// Resource types the component exports, with their names
    /// (`counters.counter`).
    resources: Vec<(ResourceType, String)>,
    /// The top-level export being walked, when it is `ns:pkg/iface@ver`.
    top: Option<String>,
}

/// The longer forms of a top-level export's name part, in the order a
/// collision uses them: `tp:generic/alpha@1.0.0` → `generic_alpha`,
/// `tp_generic_alpha`, `tp_generic_alpha_v1_0_0`. None for a plain name.
fn qualified_forms(name: &str) -> Vec<String> {
    let Some((pkg, iface, ver)) = parse_name(name) else { return Vec::new() };
    let word = |s: &str| s.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect::<String>();
    let (ns, pkg) = pkg.rsplit_once(':').unwrap_or(("", pkg));
    let mut out = vec![format!("{}_{}", word(pkg), word(iface))];
    if !ns.is_empty() {
        out.push(format!("{}_{}_{}", word(ns), word(pkg), word(iface)));
    }
    if let Some(v) = ver {
        out.push(format!("{}_{}_{}_v{}", word(ns), word(pkg), word(iface), word(v)));
    }
    out.dedup();
    out
}

impl Walk<'_> {
    fn func(&mut self, prefix: &[String], name: &str, index: ComponentExportIndex, f: &ComponentFunc) {
        let mut shown_parts: Vec<String> = prefix.to_vec();
        shown_parts.push(readable(name));
        let display = shown_parts.join(".");
        let mut params = Vec::new();
        let mut bad = None;
        for (p, ty) in f.params() {
            if let Some(resource) = resource_in(&ty) {
                self.refused.push(Refusal::Resource { resource, user: format!("`{display}` (parameter `{p}`)") });
                return;
            }
            match WitType::from_wasmtime(&ty) {
                Ok(t) => params.push((p.to_string(), t)),
                Err(e) => {
                    bad.get_or_insert_with(|| format!("function `{display}` parameter `{p}` {e}"));
                }
            }
        }
        let result_ty = f.results().next();
        if let Some(resource) = result_ty.as_ref().and_then(resource_in) {
            self.refused.push(Refusal::Resource { resource, user: format!("`{display}` (result)") });
            return;
        }
        let shown = |t: &Type| WitType::from_wasmtime(t).map_or_else(|_| "…".to_string(), |w| w.wit());
        let (result, delivery) = match &result_ty {
            None => (None, Delivery::Value),
            Some(Type::Stream(st)) => match st.ty() {
                Some(Type::U8) => (None, Delivery::Stream(StreamItem::Bytes)),
                Some(Type::String) => (None, Delivery::Stream(StreamItem::Text)),
                Some(Type::List(l)) if matches!(l.ty(), Type::U8) => (None, Delivery::Stream(StreamItem::Chunks)),
                other => {
                    let item = other.as_ref().map_or_else(|| "_".to_string(), shown);
                    bad.get_or_insert_with(|| {
                        format!(
                            "function `{display}` result is `stream<{item}>`: a tool's output is text, so only \
                             `stream<u8>`, `stream<string>` and `stream<list<u8>>` can be streamed"
                        )
                    });
                    (None, Delivery::Value)
                }
            },
            Some(Type::Future(fu)) => {
                let payload = fu.ty().map(|t| WitType::from_wasmtime(&t));
                match payload.transpose() {
                    Ok(p) if super::streams::awaitable(p.as_ref()) => (p, Delivery::Future),
                    Ok(p) => {
                        let item = p.map_or_else(|| "_".to_string(), |t| t.wit());
                        bad.get_or_insert_with(|| {
                            format!(
                                "function `{display}` result is `future<{item}>`: only a future of a number, \
                                 `bool`, `char`, `string`, `list<u8>` or `result<string, string>` can be awaited"
                            )
                        });
                        (None, Delivery::Value)
                    }
                    Err(e) => {
                        bad.get_or_insert_with(|| format!("function `{display}` result's future {e}"));
                        (None, Delivery::Value)
                    }
                }
            }
            Some(t) => match WitType::from_wasmtime(t) {
                Ok(t) => (Some(t), Delivery::Value),
                Err(e) => {
                    bad.get_or_insert_with(|| format!("function `{display}` result {e}"));
                    (None, Delivery::Value)
                }
            },
        };
        if let Some(b) = bad {
            self.refused.push(Refusal::Other(b));
            return;
        }
        let mut parts: Vec<String> = prefix.iter().map(|p| snake(p)).collect();
        parts.push(snake(name));
        let tool = parts.join("_");
        let (qualified, qualified_display) = match &self.top {
            Some(top) if !prefix.is_empty() => {
                let rest = parts[1..].join("_");
                let forms = qualified_forms(top).into_iter().map(|q| format!("{q}_{rest}")).collect();
                (forms, format!("{top}.{}", shown_parts[1..].join(".")))
            }
            _ => (Vec::new(), String::new()),
        };
        self.found.push(GenericFunction {
            tool,
            display,
            params,
            result,
            delivery,
            is_async: f.async_(),
            docs: None,
            index,
            qualified,
            qualified_display,
        });
    }

    fn instance(
        &mut self,
        prefix: &[String],
        parent: ComponentExportIndex,
        inst: &wasmtime::component::types::ComponentInstance,
    ) {
        for (name, item) in inst.exports(self.engine) {
            let Some(index) = self.component.get_export_index(Some(&parent), name) else { continue };
            match &item.ty {
                ComponentItem::Resource(r) => {
                    let mut shown = prefix.to_vec();
                    shown.push(name.to_string());
                    self.resources.push((*r, shown.join(".")));
                }
                ComponentItem::ComponentFunc(f) => self.func(prefix, name, index, f),
                ComponentItem::ComponentInstance(i) => {
                    let mut p = prefix.to_vec();
                    p.push(short_name(name).to_string());
                    self.instance(&p, index, i);
                }
                _ => {}
            }
        }
    }
}

/// Whether a top-level export is componentize-py's build-time plumbing, not
/// the author's: componentize-py (0.13 to at least 0.25) leaves the
/// instance it calls while pre-initialising the interpreter in every
/// component it builds. It is matched exactly, so a function of the
/// author's is never hidden by accident: a plain-named (not `ns:pkg/…`)
/// instance `exports` whose only function (types aside) is
/// `init: func(app-name: string, symbols: <record>, stub-wasi: bool) ->
/// result<_, string>`. Anything else named `exports` stays a tool.
fn is_componentize_py_init(
    engine: &wasmtime::Engine,
    name: &str,
    inst: &wasmtime::component::types::ComponentInstance,
) -> bool {
    use wasmtime::component::Type;
    if name != "exports" {
        return false;
    }
    let mut funcs = Vec::new();
    for (n, item) in inst.exports(engine) {
        match item.ty {
            ComponentItem::ComponentFunc(f) if funcs.is_empty() => funcs.push((n, f)),
            // The types `init` names are exported next to it.
            ComponentItem::Type(_) => {}
            _ => return false,
        }
    }
    let [("init", f)] = funcs.as_slice() else { return false };
    let params: Vec<(&str, Type)> = f.params().collect();
    let params_match = matches!(
        params.as_slice(),
        [("app-name", Type::String), ("symbols", Type::Record(_)), ("stub-wasi", Type::Bool)]
    );
    let results: Vec<Type> = f.results().collect();
    let result_matches = matches!(
        results.as_slice(),
        [Type::Result(r)] if r.ok().is_none() && matches!(r.err(), Some(Type::String))
    );
    params_match && result_matches
}

/// One line naming why a component cannot load as tools: each resource it
/// uses with the functions using it, then the other refusals, each list
/// bounded by [`MAX_REFUSALS_SHOWN`].
fn refusal_text(refused: Vec<Refusal>, resources: &[(ResourceType, String)]) -> String {
    let listed = |items: &[String]| {
        let mut out = items.iter().take(MAX_REFUSALS_SHOWN).cloned().collect::<Vec<_>>().join(", ");
        if items.len() > MAX_REFUSALS_SHOWN {
            out.push_str(&format!(" and {} more", items.len() - MAX_REFUSALS_SHOWN));
        }
        out
    };
    // Resource → its users, in the order first met.
    let mut by_resource: Vec<(ResourceType, Vec<String>)> = Vec::new();
    let mut others = Vec::new();
    for r in refused {
        match r {
            Refusal::Resource { resource, user } => match by_resource.iter_mut().find(|(t, _)| *t == resource) {
                Some((_, users)) => users.push(user),
                None => by_resource.push((resource, vec![user])),
            },
            Refusal::Other(s) => others.push(s),
        }
    }
    let mut parts: Vec<String> = by_resource
        .iter()
        .map(|(t, users)| {
            let name = resources.iter().find(|(r, _)| r == t).map(|(_, n)| format!("resource `{n}`"));
            let name = name.unwrap_or_else(|| "an imported resource".to_string());
            format!("{name} is used by {}", listed(users))
        })
        .collect();
    if !others.is_empty() {
        parts.push(listed(&others).replace(", function", "; function"));
    }
    format!(
        "cannot load as a generic component: {} (a tool takes and returns JSON: a resource handle or an error \
         context has no JSON form, and a stream or future can only be a function's whole result)",
        parts.join("; ")
    )
}

/// `ns:pkg/iface@ver` → `iface`; a plain name stays.
fn short_name(name: &str) -> &str {
    parse_name(name).map_or(name, |(_, iface, _)| iface)
}

/// Gives functions whose tool names collide their qualified names (see the
/// module docs), only those and one step at a time, until every name is
/// unique. Deterministic: it depends on the set of exports alone. An error
/// names two functions whose names still collide.
fn assign_names(found: &mut [GenericFunction]) -> Result<(), String> {
    // Level 0 is the plain name; level n the (n-1)th qualified form.
    let mut level = vec![0usize; found.len()];
    let name_at = |f: &GenericFunction, l: usize| if l == 0 { f.tool.clone() } else { f.qualified[l - 1].clone() };
    loop {
        let mut by_name: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, f) in found.iter().enumerate() {
            by_name.entry(name_at(f, level[i])).or_default().push(i);
        }
        let mut groups: Vec<(String, Vec<usize>)> = by_name.into_iter().filter(|(_, v)| v.len() > 1).collect();
        if groups.is_empty() {
            break;
        }
        groups.sort_by_key(|(_, v)| v[0]);
        for (name, members) in &groups {
            let mut moved = false;
            for &i in members {
                if level[i] < found[i].qualified.len() {
                    level[i] += 1;
                    moved = true;
                }
            }
            if !moved {
                let shown = |i: usize| {
                    if level[i] == 0 { found[i].display.clone() } else { found[i].qualified_display.clone() }
                };
                let (a, b) = (shown(members[0]), shown(members[1]));
                let any_qualified = members.iter().any(|&i| !found[i].qualified.is_empty());
                let why = if any_qualified { ", even with their package and version in the name" } else { "" };
                return Err(format!(
                    "functions `{a}` and `{b}` both become the tool `{name}`{why}; tool names must be unique"
                ));
            }
        }
    }
    for (f, l) in found.iter_mut().zip(level) {
        if l > 0 {
            f.tool = f.qualified[l - 1].clone();
            f.display = std::mem::take(&mut f.qualified_display);
        }
    }
    Ok(())
}

/// The component's generic exports: `Ok(None)` when it is not a generic
/// component (it exports a `wharf:plugin` interface, or no function outside
/// `wasi:` packages); an error when a function cannot be a tool or the
/// derived names collide.
pub(crate) fn detect(
    path: &Path,
    engine: &wasmtime::Engine,
    component: &Component,
    bytes: &[u8],
    max_tools: usize,
) -> Result<Option<GenericExports>, LoadError> {
    let ty = component.component_type();
    let exports: Vec<(String, ComponentItem)> = ty.exports(engine).map(|(n, e)| (n.to_string(), e.ty)).collect();
    if exports.iter().any(|(n, _)| parse_name(n).is_some_and(|(p, _, _)| p == crate::bindings::WIT_PACKAGE)) {
        return Ok(None);
    }
    let mut walk = Walk { engine, component, found: Vec::new(), refused: Vec::new(), resources: Vec::new(), top: None };
    let mut package = None;
    let mut version = None;
    for (name, item) in &exports {
        let parsed = parse_name(name);
        if parsed.is_some_and(|(p, _, _)| p.starts_with("wasi:")) {
            continue;
        }
        if let ComponentItem::ComponentInstance(i) = item
            && is_componentize_py_init(engine, name, i)
        {
            continue;
        }
        let Some(index) = component.get_export_index(None, name.as_str()) else { continue };
        match item {
            ComponentItem::Resource(r) => walk.resources.push((*r, name.clone())),
            ComponentItem::ComponentFunc(f) => walk.func(&[], name, index, f),
            ComponentItem::ComponentInstance(i) => {
                if let Some((p, _, v)) = parsed
                    && package.is_none()
                {
                    package = Some(p.to_string());
                    version = v.map(str::to_string);
                }
                walk.top = parsed.is_some().then(|| name.clone());
                walk.instance(&[short_name(name).to_string()], index, i);
                walk.top = None;
            }
            _ => {}
        }
    }
    let invalid = |reason: String| LoadError::Invalid { path: path.to_path_buf(), reason };
    if !walk.refused.is_empty() {
        return Err(invalid(refusal_text(walk.refused, &walk.resources)));
    }
    if walk.found.is_empty() {
        return Ok(None);
    }
    if walk.found.len() > max_tools {
        return Err(invalid(format!(
            "exports {} functions; a plugin may register at most {max_tools} tools (the operator setting \
             `{MAX_TOOLS_SETTING}`)",
            walk.found.len()
        )));
    }
    let mut functions = walk.found;
    assign_names(&mut functions).map_err(invalid)?;
    for f in &functions {
        if f.tool.len() > MAX_TOOL_NAME {
            return Err(invalid(format!(
                "function `{}`: its tool name `{}…` is longer than {MAX_TOOL_NAME} bytes",
                f.display,
                wharf_core::util::cut_str(&f.tool, MAX_TOOL_NAME)
            )));
        }
    }
    let docs = read_docs(bytes, &functions);
    for f in &mut functions {
        f.docs = docs.get(&f.display).cloned();
    }
    Ok(Some(GenericExports { functions, package, version }))
}

/// Largest `package-docs` section read; a bigger one is ignored. Room for
/// the docs of thousands of functions (a generated API component).
const MAX_DOCS_SECTION: usize = 16 << 20;
/// How deep [`package_docs_section`] looks into nested modules and
/// components.
const MAX_DOCS_DEPTH: u8 = 3;

/// The custom section id in core modules and components alike.
const CUSTOM_SECTION: u8 = 0;
/// A core module nested in a component.
const CORE_MODULE_SECTION: u8 = 1;
/// A component nested in a component.
const COMPONENT_SECTION: u8 = 4;

/// An unsigned LEB128 `u32` at `*pos`, advancing it.
fn leb_u32(b: &[u8], pos: &mut usize) -> Option<u32> {
    let mut out: u32 = 0;
    for shift in (0..35).step_by(7) {
        let byte = *b.get(*pos)?;
        *pos += 1;
        out |= u32::from(byte & 0x7f).checked_shl(shift)?;
        if byte & 0x80 == 0 {
            return Some(out);
        }
    }
    None
}

/// The sections of a module or component binary: (id, contents).
fn sections(bytes: &[u8]) -> Vec<(u8, &[u8])> {
    let mut out = Vec::new();
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return out;
    }
    let mut pos = 8;
    while pos < bytes.len() {
        let id = bytes[pos];
        pos += 1;
        let Some(len) = leb_u32(bytes, &mut pos) else { break };
        let Some(body) = bytes.get(pos..pos.saturating_add(len as usize)) else { break };
        out.push((id, body));
        pos += body.len();
    }
    out
}

/// The contents of the first `package-docs` custom section: the
/// component's own (top-level) section if it has one, else one in a nested
/// core module or component (where a `#[link_section = "package-docs"]`
/// static of a Rust component ends up), depth first.
fn package_docs_section(bytes: &[u8], depth: u8) -> Option<&[u8]> {
    let secs = sections(bytes);
    for (id, body) in &secs {
        if *id != CUSTOM_SECTION {
            continue;
        }
        let mut pos = 0;
        let len = leb_u32(body, &mut pos)? as usize;
        let name = body.get(pos..pos.saturating_add(len))?;
        if name == b"package-docs" {
            return body.get(pos + len..);
        }
    }
    if depth >= MAX_DOCS_DEPTH {
        return None;
    }
    secs.iter()
        .filter(|(id, _)| *id == CORE_MODULE_SECTION || *id == COMPONENT_SECTION)
        .find_map(|(_, body)| package_docs_section(body, depth + 1))
}

/// Function doc comments from the component's WIT docs, keyed like
/// [`GenericFunction::display`] (`greet`, `kinds.add`). Empty when the
/// component carries none, or a section that is too large or not the JSON
/// wit-parser writes.
///
/// The `package-docs` section is wit-parser's `PackageMetadata`: a format
/// byte (0 or 1), then JSON. Two shapes occur and both are read:
/// - the WIT package's own docs (what `wit-docs-inject` and the fixture
///   in `tests/plugins/generic-rust` embed): `worlds.W.func_exports` /
///   `funcs` for functions exported by a world, `interfaces.I.funcs` for
///   the package's interfaces;
/// - a decoded component's (world `root`): the same keys, with inline
///   interfaces under `worlds.root.interface_exports` / `interfaces`.
///
/// Interface functions match by the interface's name (`kinds` for
/// `example:types/kinds@0.1.0`); functions of instances nested deeper get
/// no docs.
fn read_docs(bytes: &[u8], functions: &[GenericFunction]) -> HashMap<String, String> {
    use serde_json::Value;
    let mut out = HashMap::new();
    let Some(section) = package_docs_section(bytes, 0) else { return out };
    if section.len() > MAX_DOCS_SECTION || !matches!(section.first(), Some(0 | 1)) {
        return out;
    }
    let Ok(meta) = serde_json::from_slice::<Value>(&section[1..]) else { return out };
    let docs_of = |v: Option<&Value>| v.and_then(|f| f.get("docs")).and_then(Value::as_str).map(str::to_string);
    let worlds: Vec<&Value> =
        meta.get("worlds").and_then(Value::as_object).into_iter().flat_map(|w| w.values()).collect();
    for f in functions {
        let found = match f.display.split_once('.') {
            None => worlds.iter().find_map(|w| {
                docs_of(w.pointer(&format!("/func_exports/{}", f.display)))
                    .or_else(|| docs_of(w.pointer(&format!("/funcs/{}", f.display))))
            }),
            // A qualified function (`tp:generic/alpha.greet`) gets none.
            Some((iface, func)) if !func.contains('.') && !iface.contains('/') => {
                docs_of(meta.pointer(&format!("/interfaces/{iface}/funcs/{func}"))).or_else(|| {
                    worlds.iter().find_map(|w| {
                        docs_of(w.pointer(&format!("/interface_exports/{iface}/funcs/{func}")))
                            .or_else(|| docs_of(w.pointer(&format!("/interfaces/{iface}/funcs/{func}"))))
                    })
                })
            }
            Some(_) => None,
        };
        if let Some(d) = found {
            out.insert(f.display.clone(), d);
        }
    }
    out
}

/// Indices of a version that exports no `wharf:plugin` interface.
pub(super) fn no_indices() -> Indices {
    Indices {
        plugin: None,
        configure: None,
        tool: None,
        llm: None,
        llm_images: None,
        llm_history: None,
        policy: None,
        hooks: None,
        skills: None,
        compactor: None,
    }
}

/// What a generic component is given: everything its row grants, as if it
/// had asked for it.
fn request_of(grant: &Grant) -> GrantRequest {
    GrantRequest {
        filesystem: if grant.dirs.is_empty() { FsRequest::None } else { FsRequest::ReadWrite },
        hosts: grant.hosts.clone(),
        env: grant.env.clone(),
        process: grant.process,
        memory_mb: None,
    }
}

impl PluginVersion {
    /// The generic exports, when this version is a generic component.
    pub fn generic(&self) -> Option<&GenericExports> {
        self.generic.as_deref()
    }

    /// Describes a generic component: its info, grants and tools come from
    /// its types, not from calls.
    pub(super) fn describe_generic(&mut self, grant: &Grant) -> Result<(), String> {
        let Some(g) = self.generic.clone() else { return Ok(()) };
        let stem = self.path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        self.info = PluginInfo {
            name: g.package.clone().unwrap_or(stem),
            version: g.version.clone().unwrap_or_default(),
            description: format!("generic WIT component: {} exported functions as tools", g.functions.len()),
            requests: request_of(grant),
        };
        self.effective = std::sync::Arc::new(grant.intersect(&self.info.requests));
        let mut tools = Vec::with_capacity(g.functions.len());
        let mut total = 0usize;
        for f in &g.functions {
            let schema = wit_json::params_schema(&f.params);
            let size = schema.to_string().len();
            if size > MAX_TOOL_SCHEMA {
                return Err(format!(
                    "function `{}`: its input schema of {size} bytes is larger than {MAX_TOOL_SCHEMA} bytes",
                    f.display
                ));
            }
            // Compiled now (and kept for the calls), as a plugin's own are.
            wharf_core::schema::compiled(&schema).map_err(|e| format!("function `{}`: its {e}", f.display))?;
            let description = f.description();
            total = total.saturating_add(f.tool.len() + description.len() + size);
            if total > MAX_TOOL_SPECS_TOTAL {
                return Err(format!(
                    "its tools' names, descriptions and schemas take more than {MAX_TOOL_SPECS_TOTAL} bytes \
                     (at function `{}`)",
                    f.display
                ));
            }
            tools.push(wharf_core::plugin::ToolSpec {
                name: f.tool.clone(),
                description,
                input_schema: schema,
                mode: wharf_core::plugin::ToolMode::Parallel,
            });
        }
        self.tools = tools;
        Ok(())
    }

    /// Calls the function behind tool `name` with JSON `arguments`, in a
    /// fresh sandbox.
    pub(super) async fn call_generic(
        &self,
        g: &GenericExports,
        name: &str,
        arguments: &str,
        ctx: &CallContext,
    ) -> Result<wharf_core::plugin::ToolOutcome, CallError> {
        let Some(f) = g.functions.iter().find(|f| f.tool == name) else {
            return Err(CallError::new(ToolErrorCode::HostError, format!("plugin `{}` has no tool `{name}`", self.id)));
        };
        let bad_args = |message: String| {
            Ok(wharf_core::plugin::ToolOutcome {
                content: message,
                is_error: true,
                error_code: Some(ToolErrorCode::InvalidArguments),
                details: None,
            })
        };
        let args: serde_json::Value =
            match serde_json::from_str(if arguments.trim().is_empty() { "{}" } else { arguments }) {
                Ok(v) => v,
                Err(e) => return bad_args(format!("the arguments are not JSON: {e}")),
            };
        let params = match wit_json::params_to_vals(&f.params, &args) {
            Ok(p) => p,
            Err(e) => return bad_args(format!("invalid arguments for `{}`: {e}", f.tool)),
        };
        if f.is_async || f.delivery != Delivery::Value {
            return self.call_generic_concurrent(f, params, ctx).await;
        }
        let index = f.index;
        let display = f.display.clone();
        let slots = usize::from(f.result.is_some());
        let results =
            sandboxed!(self, self.effective.clone(), self.effective.timeout_ms, self.call_fuel(), |store, inst| {
                {
                    store.data_mut().services = ctx.services.clone();
                    let func: Func = inst
                        .get_func(&mut store, index)
                        .ok_or_else(|| wasmtime::format_err!("the component has no function `{display}`"))?;
                    let mut results = vec![Val::Bool(false); slots];
                    func.call_async(&mut store, &params, &mut results).await?;
                    Ok::<_, wasmtime::Error>(results)
                }
            })?;
        self.finish_generic(f, results.first())
    }

    /// The outcome of `f` from its value (returned, or its future's): a
    /// top-level `result`'s `err` is a tool error, anything else the
    /// output as JSON text.
    pub(super) fn finish_generic(
        &self,
        f: &GenericFunction,
        value: Option<&Val>,
    ) -> Result<wharf_core::plugin::ToolOutcome, CallError> {
        let res = match (&f.result, value) {
            (None, _) => Ok(wt::ToolOutput { content: "null".into(), details: None }),
            (Some(WitType::Result(ok, er)), Some(Val::Result(r))) => {
                let (side, payload, is_ok) = match r {
                    Ok(p) => (ok, p, true),
                    Err(p) => (er, p, false),
                };
                let json = match (side.as_deref(), payload.as_deref()) {
                    (Some(t), Some(v)) => Some(wit_json::to_json(t, v, "result").map_err(mismatch)?),
                    (None, None) => None,
                    _ => {
                        return Err(mismatch(wit_json::ConvError {
                            path: "result".into(),
                            message: "the payload does not match the declared result".into(),
                        }));
                    }
                };
                if is_ok {
                    Ok(wt::ToolOutput { content: json.map_or_else(|| "null".into(), |j| j.to_string()), details: None })
                } else {
                    let message = match json {
                        Some(serde_json::Value::String(s)) => s,
                        Some(other) => other.to_string(),
                        None => format!("`{}` returned an error", f.display),
                    };
                    Err(wt::ToolError { code: ToolErrorCode::ToolError.to_string(), message })
                }
            }
            (Some(t), Some(v)) => Ok(wt::ToolOutput {
                content: wit_json::to_json(t, v, "result").map_err(mismatch)?.to_string(),
                details: None,
            }),
            (Some(_), None) => return Err(CallError::new(ToolErrorCode::Trap, "the component returned no result")),
        };
        self.finish_tool(res)
    }
}

fn mismatch(e: wit_json::ConvError) -> CallError {
    CallError::new(ToolErrorCode::Trap, format!("the component's result does not match its type: {e}"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn names_are_snake_case_and_resource_functions_readable() {
        assert_eq!(snake("next-char"), "next_char");
        assert_eq!(readable("[method]counter.bump"), "counter.bump");
        assert_eq!(readable("[constructor]counter"), "counter.constructor");
        assert_eq!(short_name("example:types/kinds@0.1.0"), "kinds");
        assert_eq!(short_name("kinds"), "kinds");
    }

    /// A component exporting `greet` (top level) and `tools.say-hi` (in an
    /// inline interface), with `package-docs` when `docs` is set.
    fn component(docs: bool) -> Vec<u8> {
        let section = if docs {
            r#"(@custom "package-docs" "\01{\"worlds\":{\"root\":{\"funcs\":{\"greet\":{\"docs\":\"Says hello.\"}}}}}")"#
        } else {
            ""
        };
        let wat = format!(
            r#"(component
              (core module $m
                (memory (export "memory") 1)
                (func (export "greet") (param i32 i32) (result i32) unreachable)
                (func (export "hi") (result i32) unreachable)
                (func (export "realloc") (param i32 i32 i32 i32) (result i32) unreachable))
              (core instance $i (instantiate $m))
              (func $greet (param "name" string) (result string)
                (canon lift (core func $i "greet") (memory (core memory $i "memory")) (realloc (core func $i "realloc"))))
              (func $hi (result u32) (canon lift (core func $i "hi")))
              (export "greet" (func $greet))
              (instance $tools (export "say-hi" (func $hi)))
              (export "tools" (instance $tools))
              {section}
            )"#
        );
        wat::parse_str(&wat).unwrap()
    }

    /// `bytes` with a `package-docs` custom section of `json` appended (the
    /// way `wit-docs-inject` does it).
    fn with_docs_section(mut bytes: Vec<u8>, json: &str) -> Vec<u8> {
        let name = b"package-docs";
        let mut body = vec![name.len() as u8];
        body.extend_from_slice(name);
        body.push(1);
        body.extend_from_slice(json.as_bytes());
        bytes.push(0);
        let mut len = body.len();
        loop {
            let b = (len & 0x7f) as u8;
            len >>= 7;
            if len == 0 {
                bytes.push(b);
                break;
            }
            bytes.push(b | 0x80);
        }
        bytes.extend_from_slice(&body);
        bytes
    }

    #[test]
    fn reads_the_wit_package_form_of_package_docs() {
        let engine = wasmtime::Engine::default();
        // The shape wit-parser's PackageMetadata::extract gives for a WIT
        // package: world functions under `func_exports`, interface
        // functions under `interfaces`; `tools.say-hi` has none.
        let json = r#"{"worlds":{"w":{"docs":"x","func_exports":{"greet":{"docs":"Greets by name."}}}},
            "interfaces":{"other":{"funcs":{"say-hi":{"docs":"not this one"}}}}}"#;
        let bytes = with_docs_section(component(false), json);
        let c = Component::new(&engine, &bytes).unwrap();
        let g = detect(Path::new("x.wasm"), &engine, &c, &bytes, 128).unwrap().unwrap();
        assert_eq!(g.functions[0].docs.as_deref(), Some("Greets by name."));
        assert_eq!(g.functions[1].docs, None);
        let json = r#"{"interfaces":{"tools":{"funcs":{"say-hi":{"docs":"Says hi."}}}}}"#;
        let bytes = with_docs_section(component(false), json);
        let c = Component::new(&engine, &bytes).unwrap();
        let g = detect(Path::new("x.wasm"), &engine, &c, &bytes, 128).unwrap().unwrap();
        assert_eq!(g.functions[0].docs, None);
        assert_eq!(g.functions[1].docs.as_deref(), Some("Says hi."));
        assert!(g.functions[1].description().starts_with("Says hi.\n\nWIT: `tools.say-hi: func() -> u32`"));
        // Not JSON, an unknown format byte: no docs, still loads.
        for bad in ["{not json", ""] {
            let bytes = with_docs_section(component(false), bad);
            let c = Component::new(&engine, &bytes).unwrap();
            let g = detect(Path::new("x.wasm"), &engine, &c, &bytes, 128).unwrap().unwrap();
            assert!(g.functions.iter().all(|f| f.docs.is_none()));
        }
    }

    /// A component exporting the instance `exports` with one function
    /// `init`, of componentize-py's type when `exact`, else with `stub-wasi`
    /// an `s32`.
    fn exports_init(exact: bool) -> Vec<u8> {
        let stub = if exact { "bool" } else { "s32" };
        let wat = format!(
            r#"(component
              (core module $m
                (memory (export "memory") 1)
                (func (export "init") (param i32 i32 i32 i32) (result i32) unreachable)
                (func (export "add") (param i32 i32) (result i32) unreachable)
                (func (export "realloc") (param i32 i32 i32 i32) (result i32) unreachable))
              (core instance $i (instantiate $m))
              (type $sym' (record (field "types-package" u32)))
              (export $sym "symbols" (type $sym'))
              (type $res (result (error string)))
              (func $init (param "app-name" string) (param "symbols" $sym) (param "stub-wasi" {stub}) (result $res)
                (canon lift (core func $i "init") (memory (core memory $i "memory")) (realloc (core func $i "realloc"))))
              (func $add (param "a" s32) (param "b" s32) (result s32) (canon lift (core func $i "add")))
              (instance $ex (export "symbols" (type $sym)) (export "init" (func $init)))
              (export "exports" (instance $ex))
              (export "add" (func $add))
            )"#
        );
        wat::parse_str(&wat).unwrap()
    }

    #[test]
    fn componentize_py_init_is_left_out_only_when_it_matches_exactly() {
        let engine = wasmtime::Engine::default();
        for (exact, want) in [(true, vec!["add"]), (false, vec!["exports_init", "add"])] {
            let bytes = exports_init(exact);
            let c = Component::new(&engine, &bytes).unwrap();
            let g = detect(Path::new("x.wasm"), &engine, &c, &bytes, 128).unwrap().unwrap();
            let tools: Vec<&str> = g.functions.iter().map(|f| f.tool.as_str()).collect();
            assert_eq!(tools, want, "exact: {exact}");
        }
    }

    #[test]
    fn detects_functions_and_reads_package_docs() {
        let engine = wasmtime::Engine::default();
        for docs in [true, false] {
            let bytes = component(docs);
            let c = Component::new(&engine, &bytes).unwrap();
            let g = detect(Path::new("x.wasm"), &engine, &c, &bytes, 128).unwrap().unwrap();
            let tools: Vec<&str> = g.functions.iter().map(|f| f.tool.as_str()).collect();
            assert_eq!(tools, ["greet", "tools_say_hi"]);
            let greet = &g.functions[0];
            assert_eq!(greet.signature(), "func(name: string) -> string");
            if docs {
                assert_eq!(greet.docs.as_deref(), Some("Says hello."));
                assert!(greet.description().starts_with("Says hello.\n\nWIT: `greet: func"), "{}", greet.description());
            } else {
                assert_eq!(greet.docs, None);
                assert_eq!(greet.description(), "WIT: `greet: func(name: string) -> string`");
            }
            assert_eq!(g.functions[1].display, "tools.say-hi");
        }
    }
}
