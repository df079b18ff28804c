// The harness shared by e2e.mjs and bench.mjs:
// - serve(): a tiny static file server for trunk's dist/ on 127.0.0.1 (node's http), with the
//   MIME types a wasm page needs; it counts the bytes it serves per path, so the benchmark can
//   report what the page really downloaded;
// - launch(): the system Chromium, headless, with WebGPU on SwiftShader (no GPU needed) and
//   without the background traffic that floods a closed network.
//
//   node serve.mjs [DIR] [PORT]      # standalone, e.g. to look at the demo by hand
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

/** Chromium flags: WebGPU on SwiftShader, and no background networking, updates or sync. */
export const CHROMIUM_ARGS = [
  '--enable-unsafe-webgpu',
  '--use-webgpu-adapter=swiftshader',
  '--no-sandbox',
  '--disable-dev-shm-usage',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--disable-default-apps',
  '--no-first-run',
  '--disable-quic',
];

/** The system Chromium (never a downloaded one), headless, with a fresh temporary profile. */
export function launch() {
  const executablePath = process.env.CHROMIUM ?? '/usr/bin/chromium';
  return chromium.launch({ executablePath, headless: true, args: CHROMIUM_ARGS });
}

const MIME = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.wasm': 'application/wasm',
  '.json': 'application/json; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.txt': 'text/plain; charset=utf-8',
  '.map': 'application/json; charset=utf-8',
};

/**
 * Serves `dir` on 127.0.0.1:`port` (0: any free port), and each directory of `mounts` under its
 * URL prefix (`{'/peer/': '.../dist'}`; the benchmark's peer). Resolves to {url, bytesServed,
 * close}.
 */
export function serve(dir, port = 0, mounts = {}) {
  const roots = [
    ...Object.entries(mounts).map(([prefix, d]) => [prefix, path.resolve(d)]),
    ['/', path.resolve(dir)],
  ];
  const served = new Map(); // url path -> bytes
  const server = http.createServer((req, res) => {
    let pathname;
    try {
      pathname = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    } catch {
      res.writeHead(400).end();
      return;
    }
    const [prefix, root] = roots.find(([p]) => pathname.startsWith(p));
    let file = path.join(root, pathname.slice(prefix.length - 1));
    if (file !== root && !file.startsWith(root + path.sep)) {
      res.writeHead(403).end();
      return;
    }
    if (fs.existsSync(file) && fs.statSync(file).isDirectory()) file = path.join(file, 'index.html');
    fs.readFile(file, (err, body) => {
      if (err) {
        res.writeHead(404, { 'content-type': 'text/plain' }).end(`not found: ${pathname}`);
        return;
      }
      const type = MIME[path.extname(file).toLowerCase()] ?? 'application/octet-stream';
      res.writeHead(200, { 'content-type': type, 'content-length': body.length, 'cache-control': 'no-cache' });
      res.end(req.method === 'HEAD' ? undefined : body);
      if (req.method !== 'HEAD') served.set(pathname, (served.get(pathname) ?? 0) + body.length);
    });
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      const { port } = server.address();
      resolve({
        url: `http://127.0.0.1:${port}/`,
        /** Bytes served under `prefix` (e.g. "/models/") since the last reset. */
        bytesServed: (prefix = '/') => [...served].filter(([p]) => p.startsWith(prefix)).reduce((s, [, n]) => s + n, 0),
        resetCounts: () => served.clear(),
        close: () => new Promise((done) => {
          server.close(done);
          server.closeAllConnections();
        }),
      });
    });
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [dir = 'dist', port = '8080'] = process.argv.slice(2);
  const { url } = await serve(dir, Number(port));
  console.log(`serving ${path.resolve(dir)} on ${url}`);
}
