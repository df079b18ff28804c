//! The model on burn-wgpu: a GPU through Vulkan, Metal or DX12, here (CI) Mesa's llvmpipe, a
//! Vulkan driver that runs the same compute shaders on the CPU. The checks the CPU backend passes,
//! again on wgpu, where no fused CPU kernel stands in for the composed tensor ops
//! ([`imbert_tests::gpu`]):
//! - plain BERT equals transformers layer by layer, and one layer's hand VJP equals autodiff;
//! - the exact IM training gradient equals PyTorch's `create_graph=True` within 1e-4 relative,
//!   and on MiniLM the f64 CPU's;
//! - IM-BERT on MiniLM gives the hidden states and residuals of the CPU in f64.
//!
//! `cargo test -p imbert-tests --features wgpu --test wgpu` (`make rust-test` runs it; Debian's
//! `mesa-vulkan-drivers` gives a machine without a GPU its Vulkan device).

imbert_tests::gpu_backend_tests!(burn::backend::Wgpu<f32, i32>);
