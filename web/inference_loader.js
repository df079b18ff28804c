// The inference worker's script (web/src/bin/inference.rs), which picks one of its two builds.
// web/post-build.sh builds the worker a second time with relaxed SIMD, whose fused
// multiply-add speeds up the CPU fallback's GEMM. A module containing relaxed-SIMD instructions
// does not load at all in a browser without them, so the choice is made here, before loading:
// the browser is asked to validate a one-function module that uses `f32x4.relaxed_madd`.
// `?simd=plain` on this script's URL (the page passes its own query on) forces the SIMD128 build.
'use strict';

// (module (func (param v128 v128 v128) (result v128)
//   local.get 0 local.get 1 local.get 2 f32x4.relaxed_madd))
const RELAXED_SIMD_PROBE = new Uint8Array([
  0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version 1
  0x01, 0x08, 0x01, 0x60, 0x03, 0x7b, 0x7b, 0x7b, 0x01, 0x7b, // type: (v128 x 3) -> v128
  0x03, 0x02, 0x01, 0x00, // one function of that type
  0x0a, 0x0d, 0x01, 0x0b, 0x00, 0x20, 0x00, 0x20, 0x01, 0x20, 0x02, 0xfd, 0x85, 0x02, 0x0b, // code
]);

const forcePlain = new URLSearchParams(self.location.search).get('simd') === 'plain';
const build = !forcePlain && WebAssembly.validate(RELAXED_SIMD_PROBE) ? 'inference_relaxed' : 'inference';
importScripts(`./${build}.js`);
wasm_bindgen({ module_or_path: `./${build}_bg.wasm` });
