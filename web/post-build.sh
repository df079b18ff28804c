#!/usr/bin/env bash
# Trunk's post-build hook (Trunk.toml), which finishes the inference worker:
# - its second build, with relaxed SIMD (`--features relaxed-simd`: the CPU fallback's GEMM on
#   fused multiply-adds), written beside trunk's SIMD128 build as inference_relaxed.js +
#   inference_relaxed_bg.wasm; web/inference_loader.js picks one per browser. A cargo feature,
#   unlike a second RUSTFLAGS, leaves the dependencies' builds alone: only `shared` and `web`
#   compile again;
# - with WASM_OPT set to a wasm-opt binary (`make site OPTIMIZE=1` installs binaryen from npm),
#   `wasm-opt -O3` on both builds: 19 to 13 MB raw, 3.4 to 3.2 MB gzipped, 3.5 minutes each,
#   verdicts no faster (README). The page's own wasm is left alone: index.html pins its hash.
set -euo pipefail
: "${TRUNK_STAGING_DIR:?run by trunk as a post_build hook (Trunk.toml)}"
profile=${TRUNK_PROFILE:-debug}
release=()
[ "$profile" = release ] && release=(--release)
cargo build --locked "${release[@]}" --target wasm32-unknown-unknown -p web --bin inference \
  --features relaxed-simd
# Cargo copies each build's output to the same path; trunk's next build copies its own back.
wasm-bindgen --target no-modules --no-typescript --out-dir "$TRUNK_STAGING_DIR" \
  --out-name inference_relaxed "${CARGO_TARGET_DIR:-target}/wasm32-unknown-unknown/$profile/inference.wasm"

if [ -n "${WASM_OPT:-}" ]; then
  # The features rustc 1.95 emits for wasm32-unknown-unknown, SIMD128 and relaxed SIMD.
  features=(--enable-simd --enable-relaxed-simd --enable-bulk-memory --enable-sign-ext
    --enable-mutable-globals --enable-nontrapping-float-to-int --enable-multivalue
    --enable-reference-types)
  for wasm in inference_bg.wasm inference_relaxed_bg.wasm; do
    "$WASM_OPT" -O3 "${features[@]}" "$TRUNK_STAGING_DIR/$wasm" -o "$TRUNK_STAGING_DIR/$wasm.opt"
    mv "$TRUNK_STAGING_DIR/$wasm.opt" "$TRUNK_STAGING_DIR/$wasm"
  done
fi
