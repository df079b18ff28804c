//! The browser demo's crate. Until the demo itself lands, this binary only links `shared` into a
//! wasm32 build, which `make test` checks, so the model and tokenizer stay wasm-compatible.

fn main() {
    let spec = shared::ConnectionSpec::default();
    // Keeps the model code in the link, so wasm-only compile errors surface here.
    std::hint::black_box(spec.per_layer(shared::BertConfig::default().num_hidden_layers).ok());
}
