// wharf web: a view over session logs. Everything shown is rebuilt from the
// session's events (streamed over SSE); actions go to the API and come back
// as events. Session text is always inserted as text, never as HTML — except
// an assistant message's `html`, which the server rendered from markdown and
// sanitised (web/render.rs); the CSP forbids inline script besides.
'use strict';

const $ = (sel, root = document) => root.querySelector(sel);

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

async function api(method, path, body) {
  const opts = { method, headers: { Accept: 'application/json' }, credentials: 'same-origin' };
  if (body !== undefined) {
    opts.headers['Content-Type'] = 'application/json';
    opts.body = JSON.stringify(body);
  }
  const r = await fetch(path, opts);
  const data = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(data.error || `${r.status} ${r.statusText}`);
  return data;
}

function showError(msg) {
  const bar = $('#error-bar');
  bar.textContent = msg;
  bar.hidden = !msg;
  if (msg) setTimeout(() => { if (bar.textContent === msg) bar.hidden = true; }, 8000);
}

function pretty(text) {
  if (typeof text !== 'string') return JSON.stringify(text, null, 2);
  try { return JSON.stringify(JSON.parse(text), null, 2); } catch { return text; }
}

function shortTime(rfc) {
  if (!rfc) return '';
  const d = new Date(rfc);
  return isNaN(d) ? rfc : d.toLocaleString();
}

function fmtInt(n) { return Number(n || 0).toLocaleString('en-US'); }

// "12.3k tokens · $0.0123 · 45% context" from a session's `usage`.
function usageText(u, long) {
  if (!u) return '';
  const parts = [];
  const tokens = u.total_tokens ?? ((u.prompt_tokens || 0) + (u.completion_tokens || 0));
  if (tokens) parts.push(long ? `${fmtInt(u.prompt_tokens)} in / ${fmtInt(u.completion_tokens)} out tokens` : `${fmtInt(tokens)} tokens`);
  if (typeof u.cost === 'number') {
    const cur = u.currency || '';
    const amount = u.cost.toFixed(u.cost < 1 ? 4 : 2);
    parts.push(cur === 'USD' || cur === '$' ? `$${amount}` : `${amount}${cur ? ` ${cur}` : ''}`);
  }
  const pct = u.context_percent ?? u.context_pct;
  if (typeof pct === 'number') parts.push(`${Math.round(pct)}% context`);
  return parts.join(' · ');
}

// ---------------------------------------------------------------------------
// Session list

let sessionsCache = [];
let homeWorkspace = null;

// The workspace filter: '' is every workspace; starts at the one `wharf web` runs in.
function fillWorkspaces() {
  const sel = $('#workspace-filter');
  const seen = new Set(sessionsCache.map((s) => s.workspace).filter(Boolean));
  if (homeWorkspace) seen.add(homeWorkspace);
  const want = sel.dataset.value ?? homeWorkspace ?? '';
  const opts = [el('option', { value: '', text: 'All workspaces' })];
  for (const w of [...seen].sort()) opts.push(el('option', { value: w, text: w === homeWorkspace ? `${w} (this)` : w }));
  sel.replaceChildren(...opts);
  sel.value = seen.has(want) ? want : '';
}

async function refreshSessions() {
  try {
    sessionsCache = await api('GET', '/api/sessions');
  } catch (e) {
    showError(`sessions: ${e.message}`);
    return;
  }
  fillWorkspaces();
  const ws = $('#workspace-filter').value;
  const ul = $('#sessions');
  ul.replaceChildren();
  for (const s of sessionsCache) {
    if (ws && s.workspace !== ws) continue;
    const cost = usageText(s.usage, false);
    const a = el('a', { href: `#/s/${encodeURIComponent(s.id)}`, 'data-id': s.id, 'data-workspace': s.workspace || '', class: current && current.id === s.id ? 'active' : '' },
      el('span', { class: 'title', text: s.title || '(no prompt yet)' }),
      el('span', { class: 'meta', text: `${shortTime(s.created)}${s.parent ? ' · fork' : ''}${s.running ? ' · running' : s.live ? ' · open' : ''}` }),
      cost ? el('span', { class: 'meta usage', text: cost }) : null);
    ul.append(el('li', {}, a));
  }
  if (current) {
    const s = sessionsCache.find((x) => x.id === current.id);
    if (s) { current.live = s.live; showUsage(s.usage); updateControls(); }
  }
}

let listTimer = null;
function listSoon() {
  clearTimeout(listTimer);
  listTimer = setTimeout(refreshSessions, 200);
}

// ---------------------------------------------------------------------------
// Session view

let current = null;

function resetView() {
  $('#transcript').replaceChildren();
  $('#queue').replaceChildren();
  $('#todo-list').replaceChildren();
  $('#todos').hidden = true;
  $('#session-meta').textContent = '';
  $('#session-usage').textContent = '';
  follow = true;
}

function showUsage(u) {
  const t = usageText(u, true);
  $('#session-usage').textContent = t;
  $('#session-usage').hidden = !t;
}

async function openSession(id) {
  if (current && current.id === id) return;
  closeSession();
  resetView();
  current = { id, es: null, live: false, running: false, lastSeq: 0, steps: new Map(), calls: new Map(), queued: new Map(), title: null, lastBoundary: null };
  $('#session-title').textContent = id;
  try {
    const s = await api('GET', `/api/sessions/${encodeURIComponent(id)}`);
    if (!current || current.id !== id) return;
    current.live = s.live;
    if (s.title) $('#session-title').textContent = s.title;
    showUsage(s.usage);
  } catch (e) {
    showError(e.message);
  }
  const es = new EventSource(`/api/sessions/${encodeURIComponent(id)}/events?from=1`);
  current.es = es;
  const mine = current;
  es.onmessage = (m) => {
    if (current !== mine) return;
    let ev;
    try { ev = JSON.parse(m.data); } catch { return; }
    if (ev.seq <= mine.lastSeq) return;
    apply(mine, ev);
  };
  es.addEventListener('error', () => { /* EventSource reconnects with Last-Event-ID */ });
  updateControls();
  highlightSession();
}

// "New session" opens a draft: the session is created by its first prompt,
// so a new session nobody writes to leaves nothing in the lists.
function openDraft() {
  closeSession();
  resetView();
  current = { id: null, draft: true, es: null, live: true, running: false, lastSeq: 0, steps: new Map(), calls: new Map(), queued: new Map(), title: null, lastBoundary: null };
  $('#session-title').textContent = 'New session';
  updateControls();
  highlightSession();
}

function closeSession() {
  if (current && current.es) current.es.close();
  current = null;
}

function highlightSession() {
  for (const a of document.querySelectorAll('#sessions a')) {
    a.classList.toggle('active', !!current && a.dataset.id === current.id);
  }
}

function updateControls() {
  if (!current) return;
  const badge = $('#session-state');
  badge.className = 'badge';
  $('#fork').disabled = !!current.draft;
  if (current.draft) { badge.textContent = 'new'; badge.classList.add('live'); }
  else if (current.running) { badge.textContent = 'running'; badge.classList.add('running'); }
  else if (current.live) { badge.textContent = 'idle'; badge.classList.add('live'); }
  else { badge.textContent = 'not open'; }
  $('#cancel').disabled = !current.running;
  $('#resume').hidden = current.live;
  for (const b of document.querySelectorAll('.approval button, .question button')) b.disabled = !current.live;
}

function transcript() { return $('#transcript'); }

// Follow the latest message: on when a session opens (so the replayed log
// ends scrolled to its last message), off when the reader scrolls up, on
// again when they scroll back to the bottom.
let follow = true;
let autoScrolling = false;

function atBottom(t) { return t.scrollHeight - t.scrollTop - t.clientHeight < 40; }

function stickToBottom() {
  if (!follow) return;
  const t = transcript();
  autoScrolling = true;
  t.scrollTop = t.scrollHeight;
  requestAnimationFrame(() => { autoScrolling = false; });
}

function append(node) {
  transcript().append(node);
  stickToBottom();
}

function sys(text, cls) {
  const d = el('div', { class: `sys ${cls || ''}`, text });
  append(d);
  return d;
}

function assistantBlock(s, turn, step) {
  const key = `${turn}.${step}`;
  let b = s.steps.get(key);
  if (!b) {
    const reasoningPre = el('pre');
    const details = el('details', { class: 'reasoning', hidden: true }, el('summary', { text: 'Reasoning' }), reasoningPre);
    const text = el('div', { class: 'text' });
    const node = el('div', { class: 'msg assistant streaming', 'data-turn': turn, 'data-step': step },
      el('div', { class: 'who', text: 'Assistant' }), details, text);
    append(node);
    b = { node, text, details, reasoningPre };
    s.steps.set(key, b);
  }
  return b;
}

function toolCard(s, id, name) {
  let c = s.calls.get(id);
  if (!c) {
    const node = el('div', { class: 'tool-card', 'data-call-id': id, 'data-tool': name });
    const status = el('span', { class: 'status', text: 'pending' });
    const summary = el('span', { class: 'tool-summary', text: name });
    node.append(el('div', { class: 'tool-head', title: id }, summary, status));
    const args = el('pre', { class: 'tool-args' });
    const argsBox = el('details', { class: 'tool-args-box' }, el('summary', { text: 'arguments' }), args);
    const diff = el('pre', { class: 'diff', hidden: true });
    const policy = el('div', { class: 'policy', hidden: true });
    const approval = el('div', { class: 'approval', hidden: true });
    const question = el('div', { class: 'question', hidden: true });
    const result = el('pre', { class: 'tool-result', hidden: true });
    const meta = el('div', { class: 'muted small tool-meta', hidden: true });
    node.append(argsBox, diff, policy, approval, question, result, meta);
    append(node);
    c = { node, status, summary, args, argsBox, diff, policy, approval, question, result, meta, name };
    s.calls.set(id, c);
  }
  return c;
}

// One line for a call: `read README.md`, `bash: cargo test`, `grep TODO`.
function callSummary(name, raw) {
  let a;
  try { a = typeof raw === 'string' ? JSON.parse(raw) : raw; } catch { a = null; }
  const firstLine = (v) => String(v).split('\n')[0].slice(0, 160);
  if (!a || typeof a !== 'object') return name;
  if (typeof a.command === 'string') return `${name}: ${firstLine(a.command)}`;
  for (const k of ['path', 'file_path', 'pattern', 'query', 'url', 'name']) {
    if (typeof a[k] === 'string' && a[k]) return `${name} ${firstLine(a[k])}`;
  }
  const first = Object.values(a).find((v) => typeof v === 'string' || typeof v === 'number');
  return first !== undefined ? `${name} ${firstLine(first)}` : name;
}

// A unified diff, each line coloured by its first character.
function showDiff(c, text) {
  if (typeof text !== 'string' || !text) return;
  const lines = text.replace(/\n$/, '').split('\n');
  c.diff.replaceChildren(...lines.map((l) => {
    let cls = 'ctx';
    if (l.startsWith('+++') || l.startsWith('---')) cls = 'file';
    else if (l.startsWith('@@')) cls = 'hunk';
    else if (l.startsWith('+')) cls = 'add';
    else if (l.startsWith('-')) cls = 'del';
    return el('span', { class: `dl ${cls}`, text: `${l}\n` });
  }));
  c.diff.hidden = false;
  c.node.classList.add('has-diff');
}

async function answer(s, callId, outcome) {
  try {
    await api('POST', `/api/sessions/${encodeURIComponent(s.id)}/approvals/${encodeURIComponent(callId)}`, { outcome });
  } catch (e) {
    showError(`approval: ${e.message}`);
  }
}

// A tool's question (`question/asked`): a form built from its flat schema
// (text, number, whole number, yes/no, a list of options), posted to
// `POST …/questions/{call}`; a misfit answer is refused (400) and the form
// stays open with the reason.
function questionForm(s, c, d) {
  const schema = d.schema || {};
  const props = schema.properties || {};
  const required = new Set(schema.required || []);
  const inputs = [];
  const rows = [];
  for (const [name, f] of Object.entries(props)) {
    const id = `q-${d.call_id}-${name}`.replace(/[^A-Za-z0-9_-]/g, '_');
    let input;
    if (Array.isArray(f.enum)) {
      input = el('select', { id, 'data-field': name },
        required.has(name) ? null : el('option', { value: '', text: '—' }),
        ...f.enum.map((o) => el('option', { value: o, text: o })));
      if (f.default !== undefined) input.value = f.default;
    } else if (f.type === 'boolean') {
      input = el('select', { id, 'data-field': name },
        required.has(name) ? null : el('option', { value: '', text: '—' }),
        el('option', { value: 'true', text: 'yes' }), el('option', { value: 'false', text: 'no' }));
      if (f.default !== undefined) input.value = String(f.default);
    } else if (f.type === 'number' || f.type === 'integer') {
      input = el('input', { id, 'data-field': name, type: 'number', step: f.type === 'integer' ? '1' : 'any', min: f.minimum, max: f.maximum });
      if (f.default !== undefined) input.value = String(f.default);
    } else {
      input = el('input', { id, 'data-field': name, type: f.format === 'email' ? 'email' : 'text', minlength: f.minLength, maxlength: f.maxLength });
      if (f.default !== undefined) input.value = String(f.default);
    }
    if (required.has(name)) input.required = true;
    inputs.push({ name, type: f.type, input });
    const label = el('label', { for: id, text: `${f.title || name}${required.has(name) ? ' *' : ''}` });
    rows.push(el('div', { class: 'field' }, label, input, f.description ? el('div', { class: 'muted small', text: f.description }) : null));
  }
  const error = el('div', { class: 'question-error', hidden: true });
  const send = async (action, content) => {
    try {
      await api('POST', `/api/sessions/${encodeURIComponent(s.id)}/questions/${encodeURIComponent(d.call_id)}`, content === undefined ? { action } : { action, content });
      error.hidden = true;
    } catch (e) {
      error.textContent = e.message;
      error.hidden = false;
    }
  };
  const form = el('form', { class: 'question-form' }, ...rows, error,
    el('div', { class: 'buttons' },
      el('button', { type: 'submit', class: 'primary', 'data-action': 'accept', text: 'Send' }),
      el('button', { type: 'button', 'data-action': 'decline', text: 'Decline', onclick: () => send('decline') }),
      el('button', { type: 'button', class: 'danger', 'data-action': 'cancel', text: 'Dismiss', onclick: () => send('cancel') })));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const content = {};
    for (const { name, type, input } of inputs) {
      const v = input.value;
      if (v === '') continue;
      if (type === 'boolean') content[name] = v === 'true';
      else if (type === 'number' || type === 'integer') content[name] = Number(v);
      else content[name] = v;
    }
    send('accept', content);
  });
  return el('div', {}, el('div', { class: 'question-message', text: `${d.source} asks: ${d.message}` }), form);
}

function renderTodos(items) {
  const ul = $('#todo-list');
  ul.replaceChildren();
  const list = Array.isArray(items) ? items : (items && Array.isArray(items.items) ? items.items : []);
  for (const it of list) {
    let text; let status = '';
    if (typeof it === 'string') text = it;
    else {
      text = it.content || it.text || it.title || it.description || JSON.stringify(it);
      status = it.status || (it.done || it.completed ? 'completed' : '');
    }
    ul.append(el('li', { class: status, 'data-status': status, text: status ? `${text} (${status.replace('_', ' ')})` : text }));
  }
  $('#todos').hidden = list.length === 0;
}

function reasonText(d) {
  let t = d.reason || '?';
  if (d.code) t += ` ${d.code}`;
  if (d.message) t += `: ${d.message}`;
  return t;
}

function apply(s, ev) {
  s.lastSeq = ev.seq;
  const d = ev.data || {};
  switch (ev.type) {
    case 'session/start': {
      const parts = [`session ${d.id}`, `created ${shortTime(d.created)}`];
      if (d.profile) parts.push(`profile ${d.profile}`);
      if (d.parent) parts.push(`forked from ${d.parent} at seq ${d.fork_seq}`);
      $('#session-meta').textContent = parts.join(' · ');
      break;
    }
    case 'user/message': {
      append(el('div', { class: 'msg user' }, el('div', { class: 'who', text: 'You' }), el('div', { class: 'text', text: d.content })));
      if (!s.title) { s.title = d.content; $('#session-title').textContent = d.content.slice(0, 120); }
      break;
    }
    case 'assistant/chunk': {
      const b = assistantBlock(s, d.turn, d.step);
      if (d.reasoning) { b.details.hidden = false; b.reasoningPre.textContent += d.reasoning; }
      if (d.text) b.text.textContent += d.text;
      stickToBottom();
      break;
    }
    case 'assistant/message': {
      const b = assistantBlock(s, d.turn, d.step);
      b.node.classList.remove('streaming');
      b.node.classList.add('final');
      if (typeof ev.html === 'string') {
        b.text.innerHTML = ev.html;
        b.text.classList.add('md');
      } else {
        b.text.textContent = d.content || '';
      }
      if (d.reasoning) { b.details.hidden = false; b.reasoningPre.textContent = d.reasoning; }
      if (!d.content && !d.reasoning && (d.tool_calls || []).length) b.node.hidden = true;
      if (d.interrupted) b.node.append(el('div', { class: 'interrupted', text: 'interrupted' }));
      break;
    }
    case 'tool/call': {
      const c = toolCard(s, d.id, d.name);
      c.args.textContent = pretty(d.arguments || '{}');
      c.summary.textContent = callSummary(d.name, d.arguments || '{}');
      showDiff(c, ev.diff);
      c.status.textContent = 'running';
      break;
    }
    case 'policy/decision': {
      const c = toolCard(s, d.call_id, d.tool);
      c.policy.hidden = false;
      c.policy.textContent = `policy: ${d.verdict}${d.reason ? ` — ${d.reason}` : ''}${d.rewritten ? ' (arguments rewritten)' : ''}`;
      break;
    }
    case 'approval/asked': {
      const c = toolCard(s, d.call_id, d.tool);
      c.status.textContent = 'needs approval';
      c.approval.hidden = false;
      c.approval.className = 'approval';
      const buttons = el('div', { class: 'buttons' },
        el('button', { type: 'button', class: 'primary', 'data-outcome': 'allowed-once', text: 'Approve', onclick: () => answer(s, d.call_id, 'allowed-once') }),
        el('button', { type: 'button', 'data-outcome': 'allowed-for-session', text: 'Allow for session', onclick: () => answer(s, d.call_id, 'allowed-for-session') }),
        el('button', { type: 'button', class: 'danger', 'data-outcome': 'rejected', text: 'Deny', onclick: () => answer(s, d.call_id, 'rejected') }));
      c.approval.replaceChildren(el('div', { text: `Approval needed: ${d.reason}` }), buttons);
      if (d.arguments !== undefined) c.args.textContent = pretty(d.arguments);
      updateControls();
      break;
    }
    case 'approval/decided': {
      const c = toolCard(s, d.call_id, '?');
      c.approval.hidden = false;
      c.approval.className = 'approval decided';
      c.approval.replaceChildren(el('div', { class: 'decision', 'data-outcome': d.outcome, text: `${d.outcome} by ${d.by}${d.note ? ` — ${d.note}` : ''}` }));
      c.status.textContent = d.outcome === 'allowed-once' || d.outcome === 'allowed-for-session' ? 'running' : d.outcome;
      break;
    }
    case 'question/asked': {
      const c = toolCard(s, d.call_id, '?');
      c.status.textContent = 'asks you';
      c.question.hidden = false;
      c.question.className = 'question';
      c.question.replaceChildren(questionForm(s, c, d));
      updateControls();
      break;
    }
    case 'question/answered': {
      const c = toolCard(s, d.call_id, '?');
      c.question.hidden = false;
      c.question.className = 'question decided';
      const content = d.content ? `: ${JSON.stringify(d.content)}` : '';
      c.question.replaceChildren(el('div', { class: 'decision', 'data-action': d.action, text: `${d.action} by ${d.by}${content}${d.note ? ` — ${d.note}` : ''}` }));
      if (c.status.textContent === 'asks you') c.status.textContent = 'running';
      break;
    }
    case 'tool/result': {
      const c = toolCard(s, d.call_id, d.name);
      c.result.hidden = false;
      c.result.textContent = d.content;
      showDiff(c, ev.diff);
      c.result.classList.toggle('error', !!d.is_error);
      c.node.classList.add(d.is_error ? 'error' : 'ok');
      c.status.textContent = d.is_error ? `error ${d.error_code || ''}`.trim() : 'done';
      const meta = [];
      if (d.plugin) meta.push(`${d.plugin}${d.version ? `@${d.version.slice(0, 12)}` : ''}`);
      if (d.duration_ms !== undefined) meta.push(`${d.duration_ms} ms`);
      if (d.truncated) meta.push(`truncated (${d.original_bytes} bytes)`);
      c.meta.hidden = meta.length === 0;
      c.meta.textContent = meta.join(' · ');
      break;
    }
    case 'turn/start':
      s.running = true;
      listSoon();
      break;
    case 'turn/end': {
      s.running = false;
      listSoon();
      refreshUsage(s);
      s.lastBoundary = ev.seq;
      for (const b of s.steps.values()) b.node.classList.remove('streaming');
      const line = sys(`turn ${d.turn} ended: ${reasonText(d)}`, 'turn-end');
      line.dataset.reason = d.reason;
      line.dataset.seq = ev.seq;
      line.append(el('a', { role: 'button', text: 'fork here', onclick: () => forkAt(s, ev.seq) }));
      break;
    }
    case 'inbox/spliced': {
      if (d.op === 'added') {
        const q = el('div', { class: 'queued', 'data-inbox-id': d.id, text: `queued (${d.kind}): ${d.text}` });
        $('#queue').append(q);
        s.queued.set(d.id, q);
      } else {
        const q = s.queued.get(d.id);
        if (q) { q.remove(); s.queued.delete(d.id); }
        if (d.op === 'discarded') sys(`queued message ${d.id} discarded`);
      }
      break;
    }
    case 'todo/updated':
      renderTodos(d.items);
      break;
    case 'tool/cell':
      // A long-running call (a program past its yield window): its state.
      sys(`cell ${d.cell} (${d.tool}): ${d.state}${d.error_code ? ` (${d.error_code})` : ''}`, 'sys-cell');
      break;
    case 'llm/retry':
      sys(`model request failed (${d.code}), retry ${d.attempt} in ${d.delay_ms} ms: ${d.message || ''}`);
      break;
    case 'plugin/loaded':
      s.failedVersions?.forEach((k) => { if (k.startsWith(`${d.id}\n`)) s.failedVersions.delete(k); });
      // A reload carries the server's announcement (`NAME reloaded (dev)`).
      if (ev.notice) sys(`↻ ${ev.notice} (${(d.digest || '').slice(0, 12)})`, `sys-plugin reloaded${d.dev ? ' dev' : ''}`);
      else sys(`plugin ${d.id} loaded (${(d.digest || '').slice(0, 12)})`, 'sys-plugin');
      break;
    case 'plugin/unloaded':
      s.failedVersions?.forEach((k) => { if (k.startsWith(`${d.id}\n`)) s.failedVersions.delete(k); });
      sys(`plugin ${d.id} unloaded (${(d.digest || '').slice(0, 12)})`, 'sys-plugin');
      break;
    case 'plugin/reload-failed': {
      // A broken file is retried several times: one line per failed version.
      s.failedVersions ??= new Set();
      const key = `${d.id}\n${d.digest || ''}`;
      if (s.failedVersions.has(key)) break;
      s.failedVersions.add(key);
      const why = (d.error || '').split('\n').find((l) => l.trim()) || '';
      const version = d.digest ? ` ${d.digest.slice(0, 12)}` : '';
      sys(`plugin ${d.id}: new version${version} failed to load (${why}); a version already loaded keeps serving`, 'sys-plugin failed');
      break;
    }
    case 'mcp/status':
      sys(`MCP server ${d.server}: ${d.state}${d.tools ? ` (${d.tools.length} tools)` : ''}${d.error ? ` — ${d.error}` : ''}`, `sys-mcp ${d.state}`);
      break;
    case 'compaction/summary':
      sys(`history ${d.from_seq}–${d.to_seq} summarized`);
      break;
    case 'session/repaired':
      sys(`log repaired (torn line ${d.torn_line})`);
      break;
    case 'step/start':
    case 'step/end':
      break;
    default:
      if (!ev.ignorable) sys(`${ev.type}`);
  }
  updateControls();
  stickToBottom();
}

async function refreshUsage(s) {
  try {
    const r = await api('GET', `/api/sessions/${encodeURIComponent(s.id)}`);
    if (current === s) showUsage(r.usage);
  } catch { /* shown on the next list refresh */ }
}

async function forkAt(s, seq) {
  try {
    const r = await api('POST', `/api/sessions/${encodeURIComponent(s.id)}/fork`, seq ? { at_seq: seq } : {});
    await refreshSessions();
    location.hash = `#/s/${encodeURIComponent(r.id)}`;
  } catch (e) {
    showError(`fork: ${e.message}`);
  }
}

async function sendPrompt(ev) {
  ev.preventDefault();
  const box = $('#prompt');
  const text = box.value.trim();
  if (!text || !current) return;
  $('#send').disabled = true;
  try {
    if (current.draft) {
      // The first prompt creates the session and starts its turn.
      const r = await api('POST', '/api/sessions', { text });
      box.value = '';
      await refreshSessions();
      location.hash = `#/s/${encodeURIComponent(r.id)}`;
      return;
    }
    await api('POST', `/api/sessions/${encodeURIComponent(current.id)}/followup`, { text });
    box.value = '';
    current.live = true;
    updateControls();
    refreshSessions();
  } catch (e) {
    showError(`prompt: ${e.message}`);
  } finally {
    $('#send').disabled = false;
  }
}

function newSession() {
  if (location.hash === '#/new') route();
  else location.hash = '#/new';
  $('#prompt').focus();
}

// ---------------------------------------------------------------------------
// Plugins view

let pluginEs = null;
let pluginRefresh = null;

function row(k, v) { return el('tr', {}, el('td', { text: k }), el('td', { text: v })); }

async function refreshPlugins() {
  let p;
  try { p = await api('GET', '/api/plugins'); } catch (e) { showError(`plugins: ${e.message}`); return; }
  const list = $('#plugin-list');
  list.replaceChildren();
  for (const v of p.plugins) {
    const e = v.effective || {};
    const dirs = (e.dirs || []).map((d) => `${d.path}:${d.access}`).join(', ') || 'none';
    const table = el('table', {},
      row('digest', v.digest),
      row('component', `${v.path} (${v.size} bytes, ${v.wit}, ${v.cache} in ${v.load_ms} ms)`),
      row('kinds', (v.kinds || []).join(', ')),
      row('tools', (v.tools || []).map((t) => `${t.name} (${t.mode})`).join(', ') || '—'),
      row('directories', dirs),
      row('hosts', (e.hosts || []).join(', ') || 'none'),
      row('env', (e.env || []).join(', ') || 'none'),
      row('process', e.process ? `yes${e.sandbox_off ? ' (sandbox off)' : ''}` : 'no'),
      row('limits', `${e.memory_mb} MiB, ${e.timeout_ms} ms per call, ${e.output_limit_bytes} bytes output`),
      row('requested', JSON.stringify(v.requested)));
    if ((e.denied || []).length) table.append(row('not granted', e.denied.join('; ')));
    list.append(el('div', { class: v.dev ? 'plugin dev' : 'plugin', 'data-plugin': v.id },
      el('h4', { text: `${v.id} — ${v.name} ${v.version}${v.dev ? ' (dev build)' : ''}` }),
      el('div', { class: 'muted', text: v.description }), table));
  }
  const mcp = $('#mcp-list');
  if (!p.mcp.length) { mcp.textContent = 'none configured'; mcp.className = 'muted'; } else {
    mcp.className = '';
    mcp.replaceChildren(...p.mcp.map((m) => el('div', { class: 'plugin', 'data-mcp': m.server },
      el('h4', { text: `${m.server} (${m.transport}${m.required ? ', required' : ''}): ${m.state}` }),
      el('div', { class: 'muted small', text: m.error ? m.error : (m.tools || []).join(', ') }))));
  }
}

function openPlugins() {
  refreshPlugins();
  if (pluginEs) return;
  const feed = $('#plugin-feed');
  feed.replaceChildren();
  pluginEs = new EventSource('/api/plugins/events');
  pluginEs.onmessage = (m) => {
    let ev;
    try { ev = JSON.parse(m.data); } catch { return; }
    const d = ev.data || {};
    let text;
    if (ev.type === 'mcp/status') text = `mcp ${d.server}: ${d.state}${d.error ? ` — ${d.error}` : ''}`;
    else if (ev.notice) text = `↻ ${ev.notice} ${(d.digest || '').slice(0, 12)}`;
    else text = `${ev.type} ${d.id} ${(d.digest || '').slice(0, 12)}${d.error ? ` — ${d.error}` : ''}`;
    feed.prepend(el('li', { class: /failed/.test(ev.type) || d.state === 'failed' ? 'failed' : (ev.notice ? 'reloaded' : ''), 'data-type': ev.type, text: `${new Date().toLocaleTimeString()} ${text}` }));
    clearTimeout(pluginRefresh);
    pluginRefresh = setTimeout(refreshPlugins, 150);
  };
}

function closePlugins() {
  if (pluginEs) { pluginEs.close(); pluginEs = null; }
}

// ---------------------------------------------------------------------------
// Routing

function route() {
  const h = location.hash || '#/';
  const m = h.match(/^#\/s\/(.+)$/);
  $('#nav-plugins').classList.toggle('active', h === '#/plugins');
  $('#nav-sessions').classList.toggle('active', h !== '#/plugins');
  if (h === '#/plugins') {
    closeSession();
    $('#session-view').hidden = true;
    $('#empty-view').hidden = true;
    $('#plugins-view').hidden = false;
    openPlugins();
  } else {
    closePlugins();
    $('#plugins-view').hidden = true;
    if (m || h === '#/new') {
      document.body.classList.remove('sidebar-open');
      $('#empty-view').hidden = true;
      $('#session-view').hidden = false;
      if (m) openSession(decodeURIComponent(m[1]));
      else openDraft();
    } else {
      closeSession();
      $('#session-view').hidden = true;
      $('#empty-view').hidden = false;
    }
  }
  highlightSession();
}

async function init() {
  $('#new-session').addEventListener('click', newSession);
  $('#prompt-form').addEventListener('submit', sendPrompt);
  $('#prompt').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) sendPrompt(e);
  });
  $('#cancel').addEventListener('click', async () => {
    if (!current) return;
    try { await api('POST', `/api/sessions/${encodeURIComponent(current.id)}/cancel`); } catch (e) { showError(`cancel: ${e.message}`); }
  });
  $('#resume').addEventListener('click', async () => {
    if (!current) return;
    try {
      await api('POST', `/api/sessions/${encodeURIComponent(current.id)}/resume`);
      current.live = true;
      updateControls();
      refreshSessions();
    } catch (e) { showError(`resume: ${e.message}`); }
  });
  $('#fork').addEventListener('click', () => { if (current && !current.draft) forkAt(current, null); });
  window.addEventListener('hashchange', route);
  transcript().addEventListener('scroll', () => {
    if (!autoScrolling) follow = atBottom(transcript());
  });
  $('#workspace-filter').addEventListener('change', (e) => {
    e.target.dataset.value = e.target.value;
    refreshSessions();
  });
  $('#toggle-sidebar').addEventListener('click', () => document.body.classList.toggle('sidebar-open'));
  try {
    const info = await api('GET', '/api/info');
    homeWorkspace = info.workspace;
    $('#profile').textContent = `profile ${info.profile} · ${info.workspace}`;
  } catch (e) {
    showError(e.message);
  }
  await refreshSessions();
  route();
  setInterval(refreshSessions, 5000);
}

init();
