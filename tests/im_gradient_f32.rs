//! The exact IM training gradient in float32 matches PyTorch's float64 `create_graph=True`
//! reference within 1e-4 relative (a separate binary: burn keeps one dtype per CPU device).

use imbert_tests::*;

#[test]
fn exact_im_gradient_matches_pytorch_create_graph_f32() {
    compare_with_pytorch::<Train>(1e-4);
}

#[test]
fn detached_im_gradient_matches_pytorch_f32() {
    compare_gradient_choice_with_pytorch::<Train>(shared::InnerGradient::Detached, 1e-4);
}

#[test]
fn frozen_im_gradient_matches_pytorch_f32() {
    compare_gradient_choice_with_pytorch::<Train>(shared::InnerGradient::Frozen, 1e-4);
}

/// MiniLM, IM on all layers, T = 5: each choice's f32 gradient is about as close to PyTorch's f64
/// one as PyTorch's own f32 gradient is (within 3x: both are rounding, which differs between
/// CPUs and GEMM kernels). At the paper's gamma 0.1 neither is close (the iterations amplify
/// rounding, docs/numerics.md); at gamma 0.01 both are, and a wrong gradient is off by O(1).
#[test]
fn minilm_gradient_choices_match_pytorch_as_closely_as_its_own_f32() {
    for setting in ["paper", "converging"] {
        for gradient in [shared::InnerGradient::Exact, shared::InnerGradient::Detached, shared::InnerGradient::Frozen] {
            let (ours, pytorch) = minilm_gradient_error::<Train>(setting, gradient);
            println!("MiniLM {setting} grad={}: ours {ours:.2e}, PyTorch f32 {pytorch:.2e} (relative to PyTorch f64)", gradient.name());
            assert!(ours <= 3.0 * pytorch + 1e-4, "{setting} grad={}: {ours} against PyTorch's own {pytorch}", gradient.name());
        }
    }
}
