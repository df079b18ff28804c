//! The checks of `tests/wgpu.rs` on burn-cuda, for a machine with an NVIDIA GPU:
//! `cargo test -p imbert-tests --features cuda --test cuda` (not in `make test`: CI has no GPU).

imbert_tests::gpu_backend_tests!(burn::backend::Cuda<f32, i32>);
