// The benchmark page's two contestants, driven by tests/e2e/bench.mjs through `window.bench`:
// - `imbert`: the demo's own inference worker (`inference_loader.js` from dist/), spoken to in its
//   JSON protocol (web/src/protocol.rs), exactly as the demo page does: the relaxed-SIMD build
//   where the browser has relaxed SIMD; `imbert-simd128`: the same worker's SIMD128 build
//   (`?simd=plain`), which browsers without relaxed SIMD run;
// - `peer`: transformers.js (onnxruntime-web) on the same MiniLM exported to ONNX
//   (tests/python/export_onnx.py), served from /peer/ (library), /ort/ (its wasm) and
//   /peer-models/ (the model), so nothing comes from a CDN.
// One "verdict" is what the demo computes per model: the clean and the perturbed text in one
// padded batch of two. With `?first=imbert|peer` the page measures the time from navigation to
// its first verdict (cold caches, fresh profile): the worker's or the library's start, the model
// download and set-up, and one verdict.

const PEER_MODEL = 'minilm-sst2';
const MAX_TOKENS = 128;

/** The demo's inference worker. */
class Imbert {
  static async start(backend, query = '') {
    const self = new Imbert();
    self.worker = new Worker(`/inference_loader.js${query}`);
    self.waiting = new Map(); // id -> resolve
    self.timings = [];
    self.worker.onmessage = (e) => self.receive(JSON.parse(e.data.json));
    self.worker.onerror = (e) => self.fail(`worker error: ${e.message}`);
    await new Promise((resolve) => self.waiting.set(0, resolve));
    const index = await (await fetch('/models/index.json')).json();
    self.model = index.models.findIndex((m) => m.task === 'sst2');
    if (self.model < 0) throw new Error('models/index.json has no SST-2 model');
    const started = await self.request('Start', {
      force_cpu: backend === 'cpu',
      base: new URL('/models/', location.href).href,
      index,
    });
    self.runtime = started.label;
    return self;
  }

  receive(message) {
    if (message === 'Ready') return this.resolve(0, message);
    const [kind, body] = Object.entries(message)[0];
    if (kind === 'Timing') this.timings.push(`${body.what}: ${body.millis.toFixed(0)} ms`);
    if (body && typeof body.id === 'number') this.resolve(body.id, { kind, ...body });
  }

  resolve(id, message) {
    const resolve = this.waiting.get(id);
    this.waiting.delete(id);
    resolve?.(message);
  }

  fail(error) {
    for (const id of [...this.waiting.keys()]) this.resolve(id, { kind: 'Failed', error });
  }

  async request(kind, body) {
    this.nextId = (this.nextId ?? 0) + 1;
    const id = this.nextId;
    const answer = new Promise((resolve) => this.waiting.set(id, resolve));
    this.worker.postMessage(JSON.stringify({ [kind]: { id, ...body } }));
    const reply = await answer;
    if (reply.kind === 'Failed') throw new Error(reply.error);
    return reply;
  }

  /** BERT's verdict on the pair: probabilities per text, tokens per text, worker compute ms. */
  async verdict(clean, perturbed) {
    const bert = { model: this.model, spec: { connection: { kind: 'monotone' }, layers: null } };
    const input = (text) => ({ text_a: text, text_b: null });
    const reply = await this.request('Analyse', { parts: [bert], clean: input(clean), perturbed: input(perturbed) });
    if (reply.kind !== 'Analysed') throw new Error(`the worker answered ${reply.kind}`);
    const [a] = reply.parts;
    return { probs: [a.clean.probs, a.perturbed.probs], tokens: [a.clean.tokens, a.perturbed.tokens], computeMs: reply.millis };
  }
}

/** transformers.js on the same model. */
class Peer {
  static async start(backend) {
    const self = new Peer();
    const tf = await import('/peer/transformers.js');
    tf.env.allowRemoteModels = false;
    tf.env.allowLocalModels = true;
    tf.env.localModelPath = '/peer-models/';
    tf.env.useBrowserCache = false;
    tf.env.backends.onnx.wasm.wasmPaths = {
      mjs: '/ort/ort-wasm-simd-threaded.asyncify.mjs',
      wasm: '/ort/ort-wasm-simd-threaded.asyncify.wasm',
    };
    self.tf = tf;
    self.tokenizer = await tf.AutoTokenizer.from_pretrained(PEER_MODEL);
    const device = backend === 'cpu' ? 'wasm' : 'webgpu';
    self.model = await tf.AutoModelForSequenceClassification.from_pretrained(PEER_MODEL, { dtype: 'fp32', device });
    self.runtime = device;
    self.threads = tf.env.backends.onnx.wasm.numThreads;
    self.timings = [];
    return self;
  }

  async verdict(clean, perturbed) {
    const t0 = performance.now();
    const inputs = this.tokenizer([clean, perturbed], { padding: true, truncation: true, max_length: MAX_TOKENS });
    const { logits } = await this.model(inputs);
    const [rows, classes] = logits.dims;
    const data = Array.from(logits.data);
    const probs = [];
    for (let r = 0; r < rows; r++) {
      const row = data.slice(r * classes, (r + 1) * classes);
      const top = Math.max(...row);
      const exp = row.map((v) => Math.exp(v - top));
      const sum = exp.reduce((s, v) => s + v, 0);
      probs.push(exp.map((v) => v / sum));
    }
    const mask = inputs.attention_mask;
    const width = mask.dims[1];
    const maskData = Array.from(mask.data, Number);
    const tokens = [0, 1].map((r) => maskData.slice(r * width, (r + 1) * width).reduce((s, v) => s + v, 0));
    return { probs, tokens, computeMs: performance.now() - t0 };
  }
}

const CONTESTANTS = {
  imbert: (backend) => Imbert.start(backend),
  'imbert-simd128': (backend) => Imbert.start(backend, '?simd=plain'),
  peer: (backend) => Peer.start(backend),
};

/** Starts `name` on `backend` (`cpu` or `webgpu`). */
async function start(name, backend) {
  const t0 = performance.now();
  const contestant = await CONTESTANTS[name](backend);
  window.bench[name] = contestant;
  return { runtime: contestant.runtime, threads: contestant.threads ?? 1, startMs: performance.now() - t0, timings: contestant.timings };
}

/** `repeats` timed verdicts of `name` on `clean` paired with each of `perturbed` (after one
 * untimed warm-up verdict on the first pair): wall ms per verdict as the page sees it, the
 * compute ms the contestant reports, and the last verdict. */
async function time(name, clean, perturbed, repeats) {
  const contestant = window.bench[name];
  await contestant.verdict(clean, perturbed[0]);
  const wall = [];
  const compute = [];
  let last;
  for (let i = 0; i < repeats; i++) {
    const t0 = performance.now();
    last = await contestant.verdict(clean, perturbed[(i + 1) % perturbed.length]);
    wall.push(performance.now() - t0);
    compute.push(last.computeMs);
  }
  return { wall, compute, last };
}

window.bench = { start, time };

// Cold start: navigation to the first verdict.
const params = new URLSearchParams(location.search);
const first = params.get('first');
if (first) {
  (async () => {
    try {
      await start(first, params.get('backend') ?? 'cpu');
      const r = await window.bench[first].verdict(
        'the acting is superb and the story moves along at a brisk pace',
        'the acting is superb and the story moves along at a slow pace',
      );
      window.__firstVerdict = { at: performance.now(), probs: r.probs, timings: window.bench[first].timings };
    } catch (e) {
      window.__firstVerdict = { error: String(e?.stack ?? e) };
    }
  })();
}
