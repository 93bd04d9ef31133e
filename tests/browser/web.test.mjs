// Drives `wharf web` in headless Chromium through a scripted session:
// prompt, watch the streamed answer, approve a tool call, see its result
// card, cancel a slow second turn, answer a tool's question in the form the
// page builds from its schema (when ASK_TOOL is set), look at the plugins
// page.
//
// Run by tests/all/web.rs, which starts `wharf web` with a scripted profile
// (policy-fixed asks before `word_count`) and passes:
//   WHARF_URL       the URL `wharf web` printed (with the token)
//   CHROMIUM        the browser binary (default /usr/bin/chromium)
//   SCREENSHOT_DIR  where to save screenshots (optional)
//   SLOW_TEXT       the full text of the slow turn (to check the cancelled prefix)
//   TODO_SESSION    a stored session with a `todo/updated` event (optional)
//   ASK_TOOL        set when a third turn calls a tool that asks the user
//                   (`evil`'s `ask`: name required, count 1–9, ok yes/no)
//   RELOAD_FROM, RELOAD_TO  another tool component, and the path the
//                   (`dev = true`) `text` row loads: copied over it on the
//                   plugins page, whose feed then shows `↻ text reloaded (dev)`
// Exit 0 and "browser test passed" on success; 1 with the reason otherwise.

import { chromium } from 'playwright-core';
import { copyFileSync, renameSync } from 'node:fs';

const url = process.env.WHARF_URL;
const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
const shots = process.env.SCREENSHOT_DIR;
const SLOW_TEXT = process.env.SLOW_TEXT || '';
const TODO_SESSION = process.env.TODO_SESSION || '';
const RELOAD_FROM = process.env.RELOAD_FROM || '';
const RELOAD_TO = process.env.RELOAD_TO || '';
const ASK_TOOL = process.env.ASK_TOOL || '';
const T = 20_000;

if (!url) {
  console.error('WHARF_URL is not set');
  process.exit(2);
}

function check(cond, msg) {
  if (!cond) throw new Error(`check failed: ${msg}`);
}

const browser = await chromium.launch({
  executablePath,
  headless: true,
  args: [
    '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
  ],
});
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
const consoleErrors = [];
page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
page.on('pageerror', (e) => consoleErrors.push(String(e)));

async function shot(name) {
  if (shots) await page.screenshot({ path: `${shots}/${name}.png`, fullPage: false }).catch(() => {});
}

let step = 'start';
try {
  step = 'open the printed URL (token → cookie → /)';
  const resp = await page.goto(url, { waitUntil: 'domcontentloaded' });
  check(resp && resp.ok(), `page status ${resp && resp.status()}`);
  check(new URL(page.url()).search === '', `token removed from the address bar: ${page.url()}`);
  await page.waitForSelector('#new-session', { timeout: T });

  step = 'new session';
  const stored = () => page.evaluate(() => fetch('/api/sessions').then((r) => r.json()).then((l) => l.length));
  const before = await stored();
  await page.click('#new-session');
  await page.waitForFunction(() => location.hash === '#/new', null, { timeout: T });
  await page.waitForSelector('#session-view:not([hidden])', { timeout: T });
  check((await stored()) === before, 'a new session is stored only with its first prompt');

  step = 'prompt';
  await page.fill('#prompt', 'How many words are in README.md?');
  await page.click('#send');
  await page.waitForFunction(() => location.hash.startsWith('#/s/'), null, { timeout: T });
  check((await stored()) === before + 1, 'the first prompt stored the session');
  await page.waitForSelector('.msg.user .text >> text=How many words are in README.md?', { timeout: T });

  step = 'streamed answer of step 1';
  const first = '.msg.assistant[data-turn="1"][data-step="1"] .text';
  await page.waitForFunction((sel) => {
    const e = document.querySelector(sel);
    return e && e.textContent.includes('Let me count the words');
  }, first, { timeout: T });
  const reasoning = await page.textContent('.msg.assistant[data-turn="1"][data-step="1"] details.reasoning pre');
  check(reasoning.includes('Count the words'), `reasoning shown: ${reasoning}`);

  step = 'approve the tool call';
  const card = '.tool-card[data-tool="word_count"]';
  const approve = `${card} .approval button[data-outcome="allowed-once"]`;
  await page.waitForSelector(`${approve}:not([disabled])`, { timeout: T });
  check((await page.textContent(`${card} .tool-args`)).includes('README.md'), 'arguments on the card');
  check((await page.textContent(`${card} .approval`)).includes('word counts need a human'), 'approval reason shown');
  await shot('1-approval');
  await page.click(approve);

  step = 'result card';
  await page.waitForSelector(`${card} .decision[data-outcome="allowed-once"]`, { timeout: T });
  await page.waitForSelector(`${card} .tool-result:not([hidden])`, { timeout: T });
  const result = await page.textContent(`${card} .tool-result`);
  check(/words/.test(result), `result card content: ${result}`);
  check(await page.isVisible(`${card}.ok`), 'result card marked ok');
  await page.waitForSelector('.turn-end[data-reason="completed"]', { timeout: T });
  const answer = await page.textContent('.msg.assistant[data-turn="1"][data-step="2"] .text');
  check(answer.startsWith('The count is: ') && /words/.test(answer), `final answer: ${answer}`);
  check(await page.isDisabled('#cancel'), 'cancel disabled when idle');
  await shot('2-result');

  step = 'second turn streams slowly';
  await page.fill('#prompt', 'Now tell me a long story.');
  await page.click('#send');
  const slow = '.msg.assistant[data-turn="2"][data-step="1"] .text';
  await page.waitForFunction((sel) => {
    const e = document.querySelector(sel);
    return e && e.textContent.length >= 8;
  }, slow, { timeout: T });
  const partial1 = await page.textContent(slow);
  await page.waitForFunction(([sel, n]) => document.querySelector(sel).textContent.length > n, [slow, partial1.length], { timeout: T });
  check(await page.isEnabled('#cancel'), 'cancel enabled while running');
  check((await page.textContent('#session-state')) === 'running', 'state badge says running');

  step = 'cancel';
  await page.click('#cancel');
  await page.waitForSelector('.turn-end[data-reason="cancelled"]', { timeout: T });
  const partial = await page.textContent(slow);
  check(partial.length > 0, 'something streamed before the cancel');
  if (SLOW_TEXT) check(SLOW_TEXT.startsWith(partial) && partial.length < SLOW_TEXT.length, `a strict prefix was kept: ${partial}`);
  await page.waitForSelector('.msg.assistant[data-turn="2"][data-step="1"] .interrupted', { timeout: T });
  await page.waitForFunction(() => document.querySelector('#cancel').disabled, null, { timeout: T });
  await shot('3-cancelled');

  if (ASK_TOOL) {
    step = "a tool's question: a form from its schema";
    await page.fill('#prompt', 'Ask me who I am.');
    await page.click('#send');
    const asks = `.tool-card[data-tool="${ASK_TOOL}"]`;
    await page.waitForSelector(`${asks} .question form button[data-action="accept"]:not([disabled])`, { timeout: T });
    check((await page.textContent(`${asks} .question`)).includes('evil asks: Who is asking?'), 'the message is shown');
    check((await page.textContent(`${asks} .question label[for$="-name"]`)).includes('Your name'), 'the field title labels it');
    check(await page.$eval(`${asks} .question [data-field="count"]`, (e) => e.type === 'number' && e.max === '9'), 'an integer field is a number input');
    check(await page.$eval(`${asks} .question [data-field="ok"]`, (e) => e.tagName === 'SELECT' && e.value === 'true'), 'a boolean is yes/no with its default');
    await page.fill(`${asks} .question [data-field="name"]`, 'Cy');
    await page.fill(`${asks} .question [data-field="count"]`, '3');
    await shot('4-question');
    await page.click(`${asks} .question button[data-action="accept"]`);
    await page.waitForSelector(`${asks} .question .decision[data-action="accept"]`, { timeout: T });
    await page.waitForSelector(`${asks} .tool-result:not([hidden])`, { timeout: T });
    const answered = await page.textContent(`${asks} .tool-result`);
    check(answered === 'accepted: {"count":3,"name":"Cy","ok":true}', `the tool got the answer: ${answered}`);
    await page.waitForFunction(() => document.querySelectorAll('.turn-end[data-reason="completed"]').length === 2, null, { timeout: T });
  }

  step = 'plugins page';
  await page.click('#nav-plugins');
  await page.waitForSelector('.plugin[data-plugin="text"]', { timeout: T });
  const plugin = await page.textContent('.plugin[data-plugin="text"]');
  check(/[0-9a-f]{64}/.test(plugin), 'digest shown');
  check(plugin.includes('word_count'), 'tools shown');
  check(plugin.includes(':ro'), 'granted directory shown');
  await page.waitForSelector('#plugin-feed li[data-type="plugin/loaded"]', { timeout: T });
  if (RELOAD_TO) {
    check(plugin.includes('(dev build)'), 'the dev row is marked');
    copyFileSync(RELOAD_FROM, `${RELOAD_TO}.tmp`);
    renameSync(`${RELOAD_TO}.tmp`, RELOAD_TO);
    await page.waitForSelector('#plugin-feed li.reloaded', { timeout: T });
    const line = await page.textContent('#plugin-feed li.reloaded');
    check(line.includes('↻ text reloaded (dev)'), `the reload is announced: ${line}`);
  }
  await shot('4-plugins');

  step = 'back to the session: rebuilt from the log';
  await page.goBack();
  await page.waitForSelector('.turn-end[data-reason="cancelled"]', { timeout: T });
  const cards = ASK_TOOL ? 2 : 1;
  check((await page.$$('.tool-card')).length === cards, `${cards} tool card(s) after reload`);

  if (TODO_SESSION) {
    step = 'a stored session with a todo list';
    await page.evaluate((id) => { location.hash = `#/s/${encodeURIComponent(id)}`; }, TODO_SESSION);
    await page.waitForSelector('#todos:not([hidden]) li[data-status="in_progress"]', { timeout: T });
    const todos = await page.$$eval('#todo-list li', (lis) => lis.map((l) => l.textContent));
    check(todos.length === 2 && todos[0].startsWith('write the tests') && todos[1].startsWith('ship it'), `todos: ${todos}`);
    await page.waitForSelector('.msg.assistant .text >> text=Planned.', { timeout: T });
    check((await page.textContent('#session-state')) === 'not open', 'a stored session is not open');
    check(await page.isVisible('#resume'), 'resume offered');
    await shot('5-todos');
  }

  const errors = consoleErrors.filter((e) => !/favicon/.test(e));
  check(errors.length === 0, `no console errors: ${errors.join(' | ')}`);
  console.log('browser test passed');
  await browser.close();
  process.exit(0);
} catch (e) {
  await shot('failure');
  console.error(`browser test failed at "${step}": ${e.message}`);
  console.error(`console errors: ${consoleErrors.join(' | ')}`);
  try {
    console.error((await page.textContent('#transcript')).slice(0, 2000));
  } catch {}
  await browser.close();
  process.exit(1);
}
