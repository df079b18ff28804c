// End-to-end test of the browser demo in headless Chromium: once on WebGPU (SwiftShader), once
// with ?backend=cpu. It builds nothing: `make e2e` runs `trunk build --release` first, and the
// page loads the models listed in dist/models/index.json.
//
//   node tests/e2e/e2e.mjs [DIST_DIR]       (default: dist; screenshots go to target/e2e/)
//
// The page's DOM contract: #status[data-state] "ready" | "error"; #runtime[data-runtime]
// "webgpu" | "cpu", its text naming the CPU build ("relaxed SIMD" or "SIMD128", which
// `?simd=plain` forces); #task; #text-a (#text-b for pairs); button[data-perturb=...];
// #perturbed-text; #diff with <ins>/<del>; #t-slider (0..15) and #gamma; #results[data-key]
// (new key per displayed result) and [data-busy]; [data-verdict="bert-clean"|...] with
// data-probs; #drift-chart svg and #residual-chart svg; button[data-search="bert"|"im"],
// #search-cancel and #search-status[data-state] "idle" | "running" | "found" | "not-found" |
// "cancelled" | "error".
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { launch, serve } from './serve.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '../..');
const dist = path.resolve(process.argv[2] ?? path.join(repo, 'dist'));
const shots = path.join(repo, 'target/e2e');
// SwiftShader compiles and runs every kernel on the CPU: be patient, but not forever.
// E2E_TIMEOUT_S raises both on slow machines.
const scale = Number(process.env.E2E_TIMEOUT_S ?? 0) * 1000;
const LOAD_TIMEOUT = Math.max(10 * 60_000, scale);
const RESULT_TIMEOUT = Math.max(5 * 60_000, scale);
const VERDICTS = ['bert-clean', 'bert-perturbed', 'im-clean', 'im-perturbed'];

function log(...args) {
  console.log(`[e2e ${new Date().toISOString().slice(11, 19)}]`, ...args);
}

/** Waits until the page shows a result other than `previousKey` and is no longer computing. */
async function nextResult(page, previousKey) {
  await page.waitForFunction(
    (prev) => {
      const r = document.querySelector('#results');
      const status = document.querySelector('#status');
      if (status?.dataset.state === 'error') return true;
      return r && r.dataset.key && r.dataset.key !== prev && r.dataset.busy !== 'true';
    },
    previousKey,
    { timeout: RESULT_TIMEOUT, polling: 100 },
  );
  await failOnError(page);
  return page.$eval('#results', (r) => r.dataset.key);
}

async function failOnError(page) {
  const state = await page.$eval('#status', (s) => [s.dataset.state, s.textContent]);
  assert.notEqual(state[0], 'error', `the page reports an error: ${state[1]}`);
}

/** The probabilities of every verdict card, checked to be distributions. */
async function verdicts(page) {
  const out = {};
  for (const v of VERDICTS) {
    const probs = await page.$eval(`[data-verdict="${v}"]`, (e) => e.dataset.probs);
    const p = probs.split(',').map(Number);
    assert.ok(p.length >= 2 && p.every((x) => Number.isFinite(x) && x >= 0 && x <= 1), `${v}: data-probs=${probs}`);
    assert.ok(Math.abs(p.reduce((a, b) => a + b, 0) - 1) < 1e-3, `${v}: probabilities sum to ${p} `);
    out[v] = p;
  }
  return out;
}

const argmax = (p) => p.indexOf(Math.max(...p));

/** Waits until the flip search ends in one of `states` (or fails). */
async function searchEnds(page, states) {
  await page.waitForFunction(
    (ok) => [...ok, 'error'].includes(document.querySelector('#search-status')?.dataset.state),
    states,
    { timeout: RESULT_TIMEOUT, polling: 100 },
  );
  const [state, message] = await page.$eval('#search-status', (s) => [s.dataset.state, s.textContent]);
  assert.ok(states.includes(state), `the search ended as ${state}: ${message}`);
}

const svg = (page, id) => page.$eval(`#${id} svg`, (s) => s.outerHTML);

/** Sets a range/number input the way a user would: value, then input and change events. */
async function setInput(page, selector, value) {
  await page.$eval(
    selector,
    (el, v) => {
      el.value = String(v);
      el.dispatchEvent(new Event('input', { bubbles: true }));
      el.dispatchEvent(new Event('change', { bubbles: true }));
    },
    value,
  );
}

async function run(server, browser, backend) {
  const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  const problems = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('response', (r) => {
    // A browser asks for /favicon.ico on its own; the page itself must not miss anything.
    if (r.status() >= 400 && !r.url().endsWith('/favicon.ico')) problems.push(`HTTP ${r.status()}: ${r.url()}`);
  });
  page.on('console', (m) => {
    // Failed requests are reported above, with their URL.
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) problems.push(`console error: ${m.text()}`);
    else if (/panicked|RuntimeError/.test(m.text())) problems.push(`console: ${m.text()}`);
  });
  page.on('dialog', async (d) => {
    problems.push(`a dialog opened (${d.type()}: ${d.message()}): typed text was executed`);
    await d.dismiss();
  });

  // Record the first verdicts shown before the first full results: BERT's verdict must not wait
  // for the slower parts (#results[data-partial] counts the parts shown).
  await page.addInitScript(() => {
    new MutationObserver(() => {
      const r = document.querySelector('#results');
      if (r?.dataset.key) return;
      const shown = r?.querySelectorAll('.verdicts .part').length ?? 0;
      if (r?.dataset.partial && shown > 0) window.__partsBeforeFirst = Math.max(window.__partsBeforeFirst ?? 0, shown);
    }).observe(document, { subtree: true, childList: true, attributes: true });
  });
  const url = server.url + (backend === 'cpu' ? '?backend=cpu' : '');
  log(backend, 'loading', url);
  const t0 = Date.now();
  await page.goto(url);
  await page.waitForFunction(
    () => ['ready', 'error'].includes(document.querySelector('#status')?.dataset.state),
    null,
    { timeout: LOAD_TIMEOUT, polling: 200 },
  );
  await failOnError(page);
  log(backend, `ready after ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  const partsBeforeFirst = await page.evaluate(() => window.__partsBeforeFirst ?? 0);
  log(backend, `verdicts shown before the first full results: ${partsBeforeFirst} part(s)`);
  assert.ok(partsBeforeFirst >= 1, 'the first verdicts waited for every part');
  const runtime = await page.$eval('#runtime', (e) => e.dataset.runtime);
  assert.equal(runtime, backend, `#runtime[data-runtime] is ${runtime}, expected ${backend}`);
  if (backend === 'cpu') {
    // The worker's relaxed-SIMD build runs exactly where this browser can load it.
    const relaxed = await page.evaluate(async () => WebAssembly.validate(await (await fetch('inference_relaxed_bg.wasm')).arrayBuffer()));
    const label = await page.$eval('#runtime', (e) => e.textContent);
    assert.equal(label.includes('relaxed SIMD'), relaxed, `#runtime says "${label}"; relaxed SIMD here: ${relaxed}`);
    log(backend, label);
  }

  // A sentence of our own, then a typo.
  await page.selectOption('#task', 'sst2');
  let key = await nextResult(page, '');
  const sentence = 'an utterly charming and beautifully acted film about friendship .';
  await page.fill('#text-a', sentence);
  key = await nextResult(page, key);
  const before = await page.inputValue('#perturbed-text');
  await page.click('button[data-perturb="typo"]');
  await page.waitForFunction((b) => document.querySelector('#perturbed-text').value !== b, before, { timeout: 30_000 });
  const perturbed = await page.inputValue('#perturbed-text');
  assert.notEqual(perturbed, sentence, 'the typo changed the text');
  const marks = await page.$$eval('#diff ins, #diff del', (es) => es.map((e) => e.textContent));
  assert.ok(marks.length > 0, '#diff marks the changed words with <ins>/<del>');
  key = await nextResult(page, key);
  const first = await verdicts(page);
  const residualBefore = await svg(page, 'residual-chart');
  const driftBefore = await svg(page, 'drift-chart');
  assert.ok(/<path|<polyline|<rect|<line/.test(driftBefore), '#drift-chart draws something');
  assert.ok(/<path|<polyline|<rect|<line/.test(residualBefore), '#residual-chart draws something');
  log(backend, 'typo result', JSON.stringify(first));

  // Fewer implicit iterations: IM's probabilities or its residual curve must change.
  const t = Number(await page.inputValue('#t-slider'));
  await setInput(page, '#t-slider', t === 1 ? 12 : 1);
  key = await nextResult(page, key);
  const second = await verdicts(page);
  const residualAfter = await svg(page, 'residual-chart');
  const imChanged = ['im-clean', 'im-perturbed'].some((v) => first[v].some((x, i) => Math.abs(x - second[v][i]) > 1e-7));
  assert.ok(imChanged || residualAfter !== residualBefore, 'moving the T slider changed IM probabilities or the residual chart');
  for (const v of ['bert-clean', 'bert-perturbed']) {
    first[v].forEach((x, i) => assert.ok(Math.abs(x - second[v][i]) < 1e-4, `${v} does not depend on T`));
  }
  // Beside the slider: each IM layer's steps that moved z (at most T) and whether its residual fell.
  const tNow = t === 1 ? 12 : 1;
  const solve = await page.$$eval('#solve-used li', (ls) => ls.map((l) => ({ text: l.textContent, steps: Number(l.dataset.steps), fell: l.dataset.fell })));
  assert.ok(solve.length > 0, '#solve-used lists the IM layers');
  for (const layer of solve) {
    assert.ok(layer.steps <= tNow && /of \d+ steps/.test(layer.text), `a layer's solve line: ${JSON.stringify(layer)}`);
  }
  log(backend, `solve at T=${tNow}: ${solve.map((l) => l.text).join('; ')}`);
  log(backend, `T ${t} -> ${t === 1 ? 12 : 1}: IM probabilities changed: ${imChanged}, residual chart changed: ${residualAfter !== residualBefore}`);

  // Markup typed by the user is text, never HTML.
  const scripts = await page.$$eval('script', (s) => s.length);
  const payload = '<script>alert(1)</script> <img src=x onerror=alert(2)> a fine film';
  await page.fill('#text-a', payload);
  key = await nextResult(page, key);
  await page.click('button[data-perturb="distractor"]');
  key = await nextResult(page, key);
  assert.equal(await page.$$eval('script', (s) => s.length), scripts, 'no <script> element was added');
  assert.equal(await page.$$eval('#diff img, #results img', (s) => s.length), 0, 'no <img> element was added');
  const diffText = await page.$eval('#diff', (d) => d.textContent);
  assert.ok(diffText.includes('<script>alert(1)</script>'), `the markup is shown as text: ${diffText}`);

  // Awkward input gives a verdict like any other: empty, emoji with right-to-left scripts, and
  // the longest text the box takes (5,000 characters, truncated to the model's 128 tokens).
  const awkward = {
    empty: '',
    'emoji + RTL': 'a fine film 🎬🍿👍🏽 فيلم رائع סרט נהדר',
    '5,000 characters': 'a gripping , heartfelt film . '.repeat(200).slice(0, 5000),
  };
  for (const [what, text] of Object.entries(awkward)) {
    await page.fill('#text-a', text);
    assert.equal((await page.inputValue('#text-a')).length, text.length, `${what}: the box holds the text`);
    key = await nextResult(page, key);
    const v = await verdicts(page);
    log(backend, `${what}: BERT ${v['bert-clean'].map((x) => x.toFixed(3))}, IM ${v['im-clean'].map((x) => x.toFixed(3))}`);
  }

  // The page answers input while a verdict is computed: the models run in a Web Worker. On a long
  // text not seen before (six forwards of 128 tokens: seconds on the CPU fallback), a timer on
  // the page's thread must keep firing, and a key typed meanwhile must reach the box at once.
  const long = 'a tender , moving and quietly funny story of two brothers . '.repeat(40);
  await page.fill('#text-a', long);
  await page.waitForFunction(() => document.querySelector('#results')?.dataset.busy === 'true', null, { timeout: 30_000, polling: 10 });
  const lag = await page.evaluate(async () => {
    const results = document.querySelector('#results');
    const start = performance.now();
    let last = start;
    let worst = 0;
    await new Promise((resolve) => {
      const timer = setInterval(() => {
        const now = performance.now();
        worst = Math.max(worst, now - last);
        last = now;
        if (results.dataset.busy !== 'true' || now - start > 120_000) {
          clearInterval(timer);
          resolve();
        }
      }, 10);
    });
    return { worst, busy: last - start };
  });
  log(backend, `while a verdict computed for ${lag.busy.toFixed(0)} ms, the page's longest stall was ${lag.worst.toFixed(0)} ms`);
  assert.ok(lag.worst < 250, `the page stalled ${lag.worst.toFixed(0)} ms while a verdict was computed`);
  key = await nextResult(page, key);
  const longer = `${long}a second story .`;
  await page.fill('#text-a', longer);
  await page.waitForFunction(() => document.querySelector('#results')?.dataset.busy === 'true', null, { timeout: 30_000, polling: 10 });
  await page.focus('#text-a');
  const typed = Date.now();
  await page.keyboard.press('Control+End');
  await page.keyboard.type('!');
  const typingMs = Date.now() - typed;
  assert.equal(await page.inputValue('#text-a'), `${longer}!`, 'the key typed during the verdict is in the box');
  log(backend, `a key typed during a verdict reached the box in ${typingMs} ms`);
  assert.ok(typingMs < 500, `typing waited ${typingMs} ms for the verdict`);
  key = await nextResult(page, key);

  // The search for an edit that fools BERT finds one on the mixed review preset, loads it into
  // the perturbed box with its diff, and the verdicts say whether IM-BERT flips on it too.
  await page.selectOption('#preset', { label: 'hand-written: mixed' });
  const mixed = await page.inputValue('#text-a');
  assert.ok(mixed.includes('forgettable'), `the preset is in the box: ${mixed}`);
  key = await nextResult(page, key);
  const t1 = Date.now();
  await page.click('button[data-search="bert"]');
  await searchEnds(page, ['found', 'not-found']);
  const [searchState, searchMessage] = await page.$eval('#search-status', (s) => [s.dataset.state, s.textContent]);
  assert.equal(searchState, 'found', `no edit found that flips BERT: ${searchMessage}`);
  key = await nextResult(page, key);
  const edited = await page.inputValue('#perturbed-text');
  assert.notEqual(edited, mixed, 'the edit found is in the perturbed box');
  const changed = await page.$$eval('#diff ins, #diff del', (es) => es.length);
  assert.ok(changed > 0, '#diff marks the edit found');
  const v = await verdicts(page);
  assert.notEqual(argmax(v['bert-clean']), argmax(v['bert-perturbed']), `the edit flips BERT: ${JSON.stringify(v)}`);
  const imFlips = argmax(v['im-clean']) !== argmax(v['im-perturbed']);
  log(backend, `search: ${searchMessage} in ${((Date.now() - t1) / 1000).toFixed(1)} s; "${edited}"; IM-BERT flips too: ${imFlips}`);
  fs.mkdirSync(shots, { recursive: true });
  await page.screenshot({ path: path.join(shots, `search-${backend}.png`), fullPage: true });

  // A second search, on the praise preset (a long one: BERT holds its verdict there through
  // every level or nearly), cancelled while it runs: the page answers the click between batches.
  await page.selectOption('#preset', { label: 'hand-written: praise' });
  key = await nextResult(page, key);
  const boxBefore = await page.inputValue('#perturbed-text');
  await page.click('button[data-search="bert"]');
  await page.waitForFunction(() => document.querySelector('#search-status')?.dataset.state === 'running', null, {
    timeout: RESULT_TIMEOUT,
    polling: 50,
  });
  await page.click('#search-cancel');
  await searchEnds(page, ['cancelled']);
  assert.equal(await page.inputValue('#perturbed-text'), boxBefore, 'a cancelled search leaves the perturbed box alone');
  log(backend, `second search: ${await page.$eval('#search-status', (s) => s.textContent)}`);

  await page.fill('#text-a', sentence);
  await page.click('button[data-perturb="typo"]');
  key = await nextResult(page, key);
  const shot = path.join(shots, `demo-${backend === 'webgpu' ? 'webgpu' : 'cpu'}.png`);
  await page.screenshot({ path: shot, fullPage: true });
  log(backend, 'screenshot', path.relative(repo, shot));

  assert.deepEqual(problems, [], `the page logged problems:\n${problems.join('\n')}`);
  await page.close();
  if (backend === 'cpu') await plainBuildAgrees(server, browser, sentence, tNow, second);
}

/**
 * The worker's SIMD128 build (`?simd=plain`), which browsers without relaxed SIMD load, gives the
 * verdicts of the build that ran above (`expected`: the sentence's at T = `t`). Fused
 * multiply-adds round differently, nothing more; but IM's solve at gamma 0.1 amplifies rounding
 * with every step on a model not trained for it (at T = 5 this model's IM probabilities differ
 * by ~0.02 between the builds), so IM is compared at T = 1 and BERT at any T.
 */
async function plainBuildAgrees(server, browser, sentence, t, expected) {
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(`${server.url}?backend=cpu&simd=plain`);
  await page.waitForFunction(() => ['ready', 'error'].includes(document.querySelector('#status')?.dataset.state), null, {
    timeout: LOAD_TIMEOUT,
    polling: 200,
  });
  await failOnError(page);
  const label = await page.$eval('#runtime', (e) => e.textContent);
  assert.ok(label.includes('SIMD128'), `?simd=plain runs the SIMD128 build: #runtime says "${label}"`);
  await page.selectOption('#task', 'sst2');
  let key = await nextResult(page, '');
  await page.fill('#text-a', sentence);
  key = await nextResult(page, key);
  await setInput(page, '#t-slider', t);
  await nextResult(page, key);
  const got = await verdicts(page);
  for (const v of t === 1 ? ['bert-clean', 'im-clean'] : ['bert-clean']) {
    const worst = Math.max(...got[v].map((x, i) => Math.abs(x - expected[v][i])));
    assert.ok(worst < 1e-3, `${v} at T=${t}: SIMD128 build ${got[v]}, the other ${expected[v]}`);
    log('cpu', `${label}: ${v} at T=${t} within ${worst.toExponential(1)} of the build above`);
  }
  assert.deepEqual(errors, [], `the SIMD128 page failed:\n${errors.join('\n')}`);
  await page.close();
}

// The worker's two builds: the SIMD128 one must load where relaxed SIMD is missing (Node 20 has
// it off), so it must not contain a single relaxed instruction; the other must contain them.
const wasm = (name) => fs.readFileSync(path.join(dist, name));
if (!WebAssembly.validate(wasm('inference_relaxed_bg.wasm'))) {
  assert.ok(WebAssembly.validate(wasm('inference_bg.wasm')), 'the SIMD128 worker uses relaxed SIMD');
  log('the SIMD128 worker loads without relaxed SIMD; the other build needs it');
} else {
  log('this Node has relaxed SIMD: the SIMD128 worker could not be checked for relaxed instructions');
}

const server = await serve(dist);
let failed = false;
// E2E_BACKENDS=cpu (or webgpu) runs one of the two.
for (const backend of (process.env.E2E_BACKENDS ?? 'webgpu,cpu').split(',')) {
  // A fresh browser (and profile) per backend: nothing cached between the two runs.
  const browser = await launch();
  try {
    await run(server, browser, backend);
    log(backend, 'passed');
  } catch (e) {
    failed = true;
    console.error(`[e2e] ${backend} FAILED:`, e.message ?? e);
  } finally {
    await browser.close();
  }
}
await server.close();
if (failed) process.exit(1);
log('all passed');
