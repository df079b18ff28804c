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
