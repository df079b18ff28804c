// Size and latency of the browser demo, from trunk's release build in dist/:
// - the wasm module, raw and gzipped (fails above 8 MB gzipped);
// - the weights: bytes on disk under dist/models/, and bytes the page actually fetched;
// - first-verdict latency: navigation start to the first #results[data-key], on WebGPU
//   (SwiftShader here) and on the CPU, each in a fresh browser profile (cold caches), and where
//   the time went (the worker's start, the backend's set-up, each bundle's load phases).
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

// ---- First verdict ----
const server = await serve(dist);
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
    const { ready, first } = await page.evaluate(() => ({ ready: window.__ready, first: window.__firstVerdict }));
    console.log(
      `${backend} (runtime ${runtime}): models ready ${ready === undefined ? '?' : `${(ready / 1000).toFixed(2)} s`}, ` +
        `first verdict ${(first / 1000).toFixed(2)} s after navigation start; ` +
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
}
await server.close();
process.exit(failed ? 1 : 0);
