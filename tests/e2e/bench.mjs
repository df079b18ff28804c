// Size and latency of the browser demo, from trunk's release build in dist/, beside its peer:
// - the wasm modules, raw and gzipped (fails above 8 MB gzipped);
// - the weights: bytes on disk under dist/models/, and bytes the page actually fetched;
// - the demo page's first verdict: navigation start to the first part's verdict shown, and to
//   the first full #results[data-key], on WebGPU
//   (SwiftShader here) and on the CPU, each in a fresh browser profile (cold caches), and where
//   the time went (the worker's start, the backend's set-up, each bundle's load phases);
// - side by side with transformers.js (onnxruntime-web, fp32) on the same MiniLM exported to
//   ONNX, in the same Chromium: BERT's verdict on a 16-token and a 128-token text (clean and
//   perturbed in one batch of two, as the demo computes it) and the time from navigation to the
//   first verdict, on both backends, with the ratio. The demo's side is its own inference worker
//   driven through its protocol (tests/e2e/bench/harness.mjs); on the CPU both of its builds,
//   relaxed SIMD and SIMD128. Needs the peer installed
//   (tests/e2e/tfjs) and the model exported (tests/python/export_onnx.py to PEER_MODEL);
//   `make web-bench` does both, else that part is skipped with the reason.
//
//   node tests/e2e/bench.mjs [DIST_DIR]     (`make web-bench` builds first)
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { fileURLToPath } from 'node:url';
import { launch, serve } from './serve.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '../..');
const dist = path.resolve(process.argv[2] ?? path.join(repo, 'dist'));
const MAX_WASM_GZIP = 8_000_000;
const TIMEOUT = 10 * 60_000;
const PEER_MODEL = path.resolve(process.env.PEER_MODEL ?? path.join(repo, 'target/peer/minilm-sst2'));
const PEER_PACKAGES = path.join(here, 'tfjs/node_modules');

const mb = (n) => `${(n / 1e6).toFixed(2)} MB`;

function filesUnder(dir) {
  if (!fs.existsSync(dir)) return [];
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    return e.isDirectory() ? filesUnder(p) : [p];
  });
}

// ---- Sizes ----
const wasm = filesUnder(dist).filter((f) => f.endsWith('.wasm'));
if (wasm.length === 0) {
  console.error(`no .wasm in ${dist}: run \`trunk build --release\` first`);
  process.exit(1);
}
let failed = false;
for (const f of wasm) {
  const raw = fs.readFileSync(f);
  const gz = zlib.gzipSync(raw, { level: 9 });
  const ok = gz.length <= MAX_WASM_GZIP;
  failed ||= !ok;
  console.log(`wasm ${path.relative(dist, f)}: ${mb(raw.length)} raw, ${mb(gz.length)} gzipped${ok ? '' : `  > ${mb(MAX_WASM_GZIP)}: TOO BIG`}`);
}
const models = filesUnder(path.join(dist, 'models'));
const modelBytes = models.reduce((s, f) => s + fs.statSync(f).size, 0);
console.log(`weights on disk (dist/models, ${models.length} files): ${mb(modelBytes)}`);

// ---- Side by side with transformers.js ----

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const ms = (x) => `${x.toFixed(0)} ms`;
// Each timed verdict pairs the text with a new perturbed copy (its first word swapped), so the
// demo's result cache never answers.
const SWAPS = ['this', 'that', 'a', 'one', 'our', 'my', 'his', 'her', 'its', 'their', 'some', 'every'];
const variants = (text) => SWAPS.map((w) => text.replace(/^\S+/, w));
const TEXTS = [
  ['16 tokens', 'the acting is superb and the story moves along at a brisk, lively pace', 10],
  [
    '128 tokens',
    'the film opens with a long, quiet shot of a harbour at dawn, and for a while it seems content ' +
      'to let the images carry the story. the fishermen go about their work, the light changes, ' +
      'and a boy watches from the pier. then the plot arrives all at once: a storm, a missing boat, ' +
      'a family feud that the script explains twice and resolves in a hurry. the performances are ' +
      'honest, especially the grandmother, who says more with a glance than the dialogue manages ' +
      'in whole scenes, but the editing undercuts them, cutting away just as a moment starts to ' +
      'breathe. the score is lovely and far too loud. by the end i admired the ambition and the ' +
      'craft of the camera work, yet i felt strangely untouched by the people it was about, and i ' +
      'doubt i will remember their names next week.',
    5,
  ],
];

/**
 * Cold first verdicts, then verdict latencies on one page, on `backend`: ours beside the peer. On
 * the CPU, ours twice: the worker's relaxed-SIMD build (what this browser loads) and its SIMD128
 * build (what a browser without relaxed SIMD loads).
 */
async function sideBySide(backend) {
  const ours = backend === 'cpu' ? ['imbert', 'imbert-simd128'] : ['imbert'];
  const names = [...ours, 'peer'];
  const first = {};
  for (const name of names) {
    const browser = await launch();
    try {
      const page = await browser.newPage();
      await page.goto(`${server.url}bench/?first=${name}&backend=${backend}`);
      await page.waitForFunction(() => window.__firstVerdict !== undefined, null, { timeout: TIMEOUT, polling: 100 });
      const result = await page.evaluate(() => window.__firstVerdict);
      if (result.error) throw new Error(`${name}'s first verdict: ${result.error}`);
      first[name] = result.at;
    } finally {
      await browser.close();
    }
  }
  const browser = await launch();
  try {
    const page = await browser.newPage();
    await page.goto(`${server.url}bench/`);
    await page.waitForFunction(() => window.bench !== undefined);
    const setup = {};
    for (const name of names) {
      setup[name] = await page.evaluate(([n, b]) => window.bench.start(n, b), [name, backend]);
    }
    console.log(
      `  beside transformers.js ${backend === 'cpu' ? '(wasm, fp32' : '(webgpu, fp32'}, ` +
        `runtime ${setup.peer.runtime}, ${setup.peer.threads} thread(s)); ` +
        'one verdict = the clean and the perturbed text in one batch of two:',
    );
    const row = (cells) => console.log(`  | ${cells.join(' | ')} |`);
    const ratios = (of) => ours.map((n) => (of[n] / of.peer).toFixed(2)).join(' / ');
    row(['', ...ours.map((n) => `this project, ${setup[n].runtime}`), 'transformers.js', 'ours / peer']);
    row(Array(ours.length + 3).fill('---'));
    row(['first verdict after navigation', ...names.map((n) => ms(first[n])), ratios(first)]);
    for (const [label, text, repeats] of TEXTS) {
      const timed = {};
      for (const name of names) {
        timed[name] = await page.evaluate(([n, t, v, r]) => window.bench.time(n, t, v, r), [name, text, variants(text), repeats]);
      }
      const wall = Object.fromEntries(names.map((n) => [n, median(timed[n].wall)]));
      // The same pair went last to each: the stacks must agree (ours runs the int8 bundle,
      // dequantized; the peer the fp32 weights it was quantized from).
      const gaps = ours.map((n) =>
        Math.max(...timed[n].last.probs.flatMap((p, i) => p.map((v, j) => Math.abs(v - timed.peer.last.probs[i][j])))),
      );
      const gap = Math.max(...gaps);
      if (!(gap < 0.05)) throw new Error(`ours and the peer disagree on the ${label} text: probabilities ${gap.toFixed(3)} apart`);
      const notes = `median of ${repeats}; tokens ${timed.imbert.last.tokens.join('/')} and ` +
        `${timed.peer.last.tokens.join('/')}; worker compute ${ours.map((n) => ms(median(timed[n].compute))).join(' / ')}; ` +
        `probabilities within ${gap.toFixed(3)}`;
      row([`verdict, ${label} (${notes})`, ...names.map((n) => ms(wall[n])), ratios(wall)]);
    }
  } finally {
    await browser.close();
  }
}

// ---- First verdict ----
const server = await serve(dist, 0, {
  '/bench/': path.join(here, 'bench'),
  '/peer/': path.join(PEER_PACKAGES, '@huggingface/transformers/dist'),
  '/ort/': path.join(PEER_PACKAGES, 'onnxruntime-web/dist'),
  '/peer-models/minilm-sst2/': PEER_MODEL,
});
const peerMissing = [
  [path.join(PEER_MODEL, 'onnx/model.onnx'), 'tests/python/export_onnx.py'],
  [path.join(PEER_PACKAGES, '@huggingface/transformers/dist/transformers.js'), 'npm ci in tests/e2e/tfjs'],
].filter(([f]) => !fs.existsSync(f));
// E2E_BACKENDS=cpu (or webgpu) measures one of the two.
for (const backend of (process.env.E2E_BACKENDS ?? 'webgpu,cpu').split(',')) {
  const browser = await launch();
  try {
    const page = await browser.newPage();
    // The page logs where the time went before the first verdict (`timing: ...`, from the worker).
    const timings = [];
    page.on('console', (m) => {
      if (m.text().startsWith('timing: ')) timings.push(m.text().slice('timing: '.length));
    });
    server.resetCounts();
    // Timestamp the first displayed result from inside the page (performance.now() counts from
    // navigation start), so polling does not add to it.
    await page.addInitScript(() => {
      const look = () => {
        const r = document.querySelector('#results');
        if (r?.dataset.key && window.__firstVerdict === undefined) window.__firstVerdict = performance.now();
        if (r?.querySelector('.verdicts .part') && window.__firstPart === undefined) window.__firstPart = performance.now();
        const s = document.querySelector('#status');
        if (s?.dataset.state === 'ready' && window.__ready === undefined) window.__ready = performance.now();
      };
      new MutationObserver(look).observe(document, { subtree: true, childList: true, attributes: true });
    });
    await page.goto(server.url + (backend === 'cpu' ? '?backend=cpu' : ''));
    await page.waitForFunction(
      () => window.__firstVerdict !== undefined || document.querySelector('#status')?.dataset.state === 'error',
      null,
      { timeout: TIMEOUT, polling: 250 },
    );
    const [state, message] = await page.$eval('#status', (s) => [s.dataset.state, s.textContent]);
    if (state === 'error') throw new Error(`the page reports an error: ${message}`);
    const runtime = await page.$eval('#runtime', (e) => e.dataset.runtime);
    const { ready, first, part } = await page.evaluate(() => ({
      ready: window.__ready,
      first: window.__firstVerdict,
      part: window.__firstPart,
    }));
    console.log(
      `${backend} (runtime ${runtime}): models ready ${ready === undefined ? '?' : `${(ready / 1000).toFixed(2)} s`}, ` +
        `first verdict (BERT's) ${(part / 1000).toFixed(2)} s and every part's ${(first / 1000).toFixed(2)} s after navigation start; ` +
        `fetched ${mb(server.bytesServed('/models/'))} of models, ${mb(server.bytesServed('/'))} in all`,
    );
    if (runtime !== backend) {
      console.log(`  (asked for ${backend}, got ${runtime})`);
    }
    for (const t of timings) console.log(`  ${t}`);
  } catch (e) {
    failed = true;
    console.error(`${backend}: FAILED: ${e.message ?? e}`);
  } finally {
    await browser.close();
  }
  if (peerMissing.length > 0) {
    console.log(`  beside transformers.js: skipped, no ${peerMissing.map(([f, how]) => `${path.relative(repo, f)} (${how})`).join(', ')}`);
    continue;
  }
  try {
    await sideBySide(backend);
  } catch (e) {
    failed = true;
    console.error(`${backend}: beside transformers.js: FAILED: ${e.message ?? e}`);
  }
}
await server.close();
process.exit(failed ? 1 : 0);
