// What a reader of `wharf web` sees, in headless Chromium: model markdown
// rendered and sanitised, a diff on an edit card, one-line tool summaries,
// cost and context, the workspace filter, scroll to the last message of a
// long session, and the 420 px layout.
//
// Run by tests/all/web_ui.rs, which starts `wharf web` over stored sessions:
//   WHARF_URL       the URL `wharf web` printed (with the token)
//   CHROMIUM        the browser binary
//   SCREENSHOT_DIR  where to save screenshots (optional)
//   MD_SESSION      markdown + edit/write/bash cards, in this workspace
//   LONG_SESSION    40 turns, in this workspace; its last answer is LAST_TEXT
//   OTHER_SESSION   a session of another workspace
// Exit 0 and "ui test passed" on success; 1 with the reason otherwise.

import { chromium } from 'playwright-core';

const env = (k) => {
  const v = process.env[k];
  if (!v) { console.error(`${k} is not set`); process.exit(2); }
  return v;
};
const url = env('WHARF_URL');
const MD = env('MD_SESSION');
const LONG = env('LONG_SESSION');
const LAST = env('LAST_TEXT');
const OTHER = env('OTHER_SESSION');
const shots = process.env.SCREENSHOT_DIR;
const T = 20_000;

function check(cond, msg) {
  if (!cond) throw new Error(`check failed: ${msg}`);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-sync'],
});
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
const consoleErrors = [];
const dialogs = [];
page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
page.on('pageerror', (e) => consoleErrors.push(String(e)));
// An alert() from model text would land here.
page.on('dialog', async (d) => { dialogs.push(d.message()); await d.dismiss().catch(() => {}); });

async function shot(name) {
  if (shots) await page.screenshot({ path: `${shots}/${name}.png`, fullPage: false }).catch(() => {});
}

async function open(id) {
  await page.evaluate((s) => { location.hash = `#/s/${encodeURIComponent(s)}`; }, id);
  await page.waitForSelector('#session-view:not([hidden])', { timeout: T });
  await page.waitForSelector('.turn-end', { timeout: T });
}

// The transcript ends scrolled to its last message.
async function scrolledToEnd() {
  return page.evaluate(() => {
    const t = document.querySelector('#transcript');
    const msgs = t.querySelectorAll('.msg');
    const last = msgs[msgs.length - 1];
    if (!last) return false;
    const tr = t.getBoundingClientRect();
    const lr = last.getBoundingClientRect();
    return t.scrollHeight > t.clientHeight + 200
      && t.scrollHeight - t.scrollTop - t.clientHeight < 40
      && lr.top >= tr.top - 1 && lr.top < tr.bottom;
  });
}

async function noHorizontalOverflow() {
  return page.evaluate(() => {
    const d = document.documentElement;
    return { doc: d.scrollWidth, body: document.body.scrollWidth, width: d.clientWidth };
  });
}

let step = 'start';
try {
  step = 'open the page';
  const resp = await page.goto(url, { waitUntil: 'domcontentloaded' });
  check(resp && resp.ok(), `page status ${resp && resp.status()}`);
  await page.waitForSelector(`#sessions a[data-id="${MD}"]`, { timeout: T });

  step = 'the workspace filter starts at this workspace';
  check(await page.$(`#sessions a[data-id="${LONG}"]`), 'this workspace\'s other session listed');
  check(!(await page.$(`#sessions a[data-id="${OTHER}"]`)), 'another workspace\'s session hidden');
  const ws = await page.$eval('#workspace-filter', (s) => s.value);
  check(ws.length > 0, `a workspace is selected: "${ws}"`);
  await page.selectOption('#workspace-filter', '');
  await page.waitForSelector(`#sessions a[data-id="${OTHER}"]`, { timeout: T });
  check(await page.$(`#sessions a[data-id="${MD}"]`), 'all workspaces: this one too');
  await page.selectOption('#workspace-filter', '/elsewhere/project');
  await page.waitForFunction((md) => !document.querySelector(`#sessions a[data-id="${md}"]`), MD, { timeout: T });
  check(await page.$(`#sessions a[data-id="${OTHER}"]`), 'the other workspace alone');
  await page.selectOption('#workspace-filter', ws);
  await page.waitForSelector(`#sessions a[data-id="${MD}"]`, { timeout: T });
  check(!(await page.$(`#sessions a[data-id="${OTHER}"]`)), 'back to this workspace');

  step = 'markdown rendered';
  await open(MD);
  await page.waitForSelector('.msg.assistant .text.md h1', { timeout: T });
  check((await page.textContent('.msg.assistant .text.md h1')) === 'Release notes', 'heading');
  const code = await page.textContent('.msg.assistant .text.md pre code.language-rust');
  check(code.includes('fn main()'), `code block: ${code}`);
  check(await page.evaluate(() => getComputedStyle(document.querySelector('.md pre')).backgroundColor !== 'rgba(0, 0, 0, 0)'), 'code block styled');

  step = 'model HTML is not run';
  const unsafe = await page.evaluate(() => ({
    imgs: document.querySelectorAll('#transcript img').length,
    scripts: document.querySelectorAll('#transcript script').length,
    handlers: [...document.querySelectorAll('#transcript *')].filter((e) => [...e.attributes].some((a) => a.name.startsWith('on'))).length,
    js: [...document.querySelectorAll('a[href]')].filter((a) => /^\s*javascript:/i.test(a.getAttribute('href'))).length,
    text: document.querySelector('.msg.assistant .text.md').textContent,
    links: [...document.querySelectorAll('.md a[href]')].map((a) => a.getAttribute('href')),
  }));
  check(unsafe.imgs === 0 && unsafe.scripts === 0 && unsafe.handlers === 0, `no img/script/handler: ${JSON.stringify(unsafe)}`);
  check(unsafe.js === 0, `no javascript: href: ${unsafe.links}`);
  check(unsafe.text.includes('<img src=x onerror=alert(1)>'), 'raw HTML shown as text');
  check(unsafe.links.includes('https://example.com/docs'), `a safe link kept: ${unsafe.links}`);
  check(dialogs.length === 0, `no dialog opened: ${dialogs}`);

  step = 'edit and write cards show diffs';
  const edit = '.tool-card[data-tool="edit"]';
  check((await page.textContent(`${edit} .tool-summary`)) === 'edit src/lib.rs', 'edit summary line');
  const del = await page.$$eval(`${edit} pre.diff .dl.del`, (l) => l.map((x) => x.textContent));
  const add = await page.$$eval(`${edit} pre.diff .dl.add`, (l) => l.map((x) => x.textContent));
  check(del.length === 1 && del[0].startsWith('-fn old() {}'), `removed line: ${del}`);
  const hunk = await page.textContent(`${edit} pre.diff .dl.hunk`);
  check(hunk.startsWith('@@ -3,3'), `the result's diff (file line numbers) replaced the call's: ${hunk}`);
  check(add.length === 1 && add[0].startsWith('+fn new() {}'), `added line: ${add}`);
  const colours = await page.evaluate((sel) => {
    const c = (q) => getComputedStyle(document.querySelector(`${sel} pre.diff ${q}`)).backgroundColor;
    return [c('.dl.add'), c('.dl.del'), c('.dl.ctx')];
  }, edit);
  check(colours[0] !== colours[1] && colours[0] !== colours[2], `added/removed lines coloured: ${colours}`);
  const wadd = await page.$$eval('.tool-card[data-tool="write"] pre.diff .dl.add', (l) => l.map((x) => x.textContent));
  check(wadd.length === 2 && wadd[0].startsWith('+line one'), `a written file shown as added: ${wadd}`);

  step = 'tool summaries and multi-line output';
  const bash = '.tool-card[data-tool="bash"]';
  check((await page.textContent(`${bash} .tool-summary`)) === 'bash: cargo test', 'bash summary line (first line of the command)');
  check(!(await page.isVisible(`${bash} .tool-args`)), 'raw arguments folded away');
  const out = await page.textContent(`${bash} .tool-result`);
  const rows = await page.$eval(`${bash} .tool-result`, (e) => e.getClientRects()[0].height / parseFloat(getComputedStyle(e).lineHeight));
  check(out.split('\n').length === 3 && rows >= 2.5, `multi-line output kept (${rows} rows): ${out}`);

  step = 'cost and context';
  const usage = await page.textContent('#session-usage');
  check(/\$0\.00\d+/.test(usage) && usage.includes('75% context') && usage.includes('2,500 in'), `usage line: ${usage}`);
  const listed = await page.textContent(`#sessions a[data-id="${MD}"]`);
  check(listed.includes('2,650 tokens') && listed.includes('$'), `list shows tokens and cost: ${listed}`);
  await shot('1-markdown-diff');

  step = 'a long session opens at its last message';
  await open(LONG);
  await page.waitForSelector(`.msg.assistant .text >> text=${LAST}`, { timeout: T });
  await page.waitForFunction(() => document.querySelectorAll('#transcript .msg').length >= 80, null, { timeout: T });
  await page.waitForTimeout(300);
  check(await scrolledToEnd(), 'scrolled to the last message');
  await shot('2-long-session-end');

  step = '420 px wide';
  await page.setViewportSize({ width: 420, height: 800 });
  await open(MD);
  await page.waitForSelector('.msg.assistant .text.md h1', { timeout: T });
  await page.waitForTimeout(200);
  let o = await noHorizontalOverflow();
  check(o.doc <= 420 && o.body <= 420, `no horizontal scroll at 420 px: ${JSON.stringify(o)}`);
  check(!(await page.isVisible('#sidebar')), 'sidebar collapsed');
  check(await page.isVisible('#prompt') && await page.isVisible('#send'), 'prompt usable');
  await shot('3-narrow-session');
  await page.click('#toggle-sidebar');
  await page.waitForSelector('#sidebar', { state: 'visible', timeout: T });
  o = await noHorizontalOverflow();
  check(o.doc <= 420, `no horizontal scroll with the drawer open: ${JSON.stringify(o)}`);
  await shot('4-narrow-sidebar');
  await page.click(`#sessions a[data-id="${LONG}"]`);
  await page.waitForSelector('#sidebar', { state: 'hidden', timeout: T });
  await page.waitForSelector(`.msg.assistant .text >> text=${LAST}`, { timeout: T });
  await page.waitForTimeout(300);
  check(await scrolledToEnd(), 'scrolled to the last message at 420 px');
  o = await noHorizontalOverflow();
  check(o.doc <= 420, `no horizontal scroll on the long session: ${JSON.stringify(o)}`);
  await shot('5-narrow-long');

  const errors = consoleErrors.filter((e) => !/favicon/.test(e));
  check(errors.length === 0, `no console errors: ${errors.join(' | ')}`);
  check(dialogs.length === 0, `no dialog opened: ${dialogs}`);
  console.log('ui test passed');
  await browser.close();
  process.exit(0);
} catch (e) {
  await shot('failure');
  console.error(`ui test failed at "${step}": ${e.message}`);
  console.error(`console errors: ${consoleErrors.join(' | ')}`);
  await browser.close();
  process.exit(1);
}
