#!/usr/bin/env bash
# Trunk's post-build hook (Trunk.toml): the inference worker's second build, with relaxed SIMD
# (`--features relaxed-simd`: the CPU fallback's GEMM on fused multiply-adds), written beside
# trunk's SIMD128 build as inference_relaxed.js + inference_relaxed_bg.wasm;
# web/inference_loader.js picks one per browser. A cargo feature, unlike a second RUSTFLAGS,
# leaves the dependencies' builds alone: only `shared` and `web` compile again.
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
