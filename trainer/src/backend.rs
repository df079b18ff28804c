//! Which burn backend runs the model. CPU (ndarray) is always built; wgpu and CUDA are cargo
//! features (`--features wgpu`, `--features cuda`).

use clap::ValueEnum;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// CPU, pure Rust (burn-ndarray).
    Ndarray,
    /// GPU through wgpu (Vulkan, Metal, DX12, WebGPU).
    Wgpu,
    /// NVIDIA GPU through CUDA.
    Cuda,
}

pub type Cpu = burn::backend::NdArray<f32>;
#[cfg(feature = "wgpu")]
pub type Wgpu = burn::backend::Wgpu<f32, i32>;
#[cfg(feature = "cuda")]
pub type Cuda = burn::backend::Cuda<f32, i32>;

/// Calls `$body` with the type alias `$B` bound to the chosen backend and `$device` to its device.
#[macro_export]
macro_rules! with_backend {
    ($kind:expr, |$B:ident, $device:ident| $body:expr) => {{
        match $kind {
            $crate::backend::BackendKind::Ndarray => {
                type $B = $crate::backend::Cpu;
                let $device = burn::backend::ndarray::NdArrayDevice::Cpu;
                $body
            }
            #[cfg(feature = "wgpu")]
            $crate::backend::BackendKind::Wgpu => {
                type $B = $crate::backend::Wgpu;
                let $device = burn::backend::wgpu::WgpuDevice::default();
                $body
            }
            #[cfg(feature = "cuda")]
            $crate::backend::BackendKind::Cuda => {
                type $B = $crate::backend::Cuda;
                let $device = burn::backend::cuda::CudaDevice::default();
                $body
            }
            #[allow(unreachable_patterns)]
            other => anyhow::bail!(
                "backend {other:?} is not compiled in; rebuild with `--features {}`",
                format!("{other:?}").to_lowercase()
            ),
        }
    }};
}
