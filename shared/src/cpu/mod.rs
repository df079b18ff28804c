//! The plain CPU backend made fast: fused kernels (also as autodiff nodes for training), the
//! GEMM underneath them, and the allocator settings of the native binaries.

#[cfg(not(target_arch = "wasm32"))]
pub mod allocator;
pub mod blas;
pub mod kernels;
