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
                $crate::backend::probe_cuda()?;
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

/// Checks that the NVIDIA driver loads and sees at least one GPU, so that `--backend cuda` on a
/// machine without one is an error message, not a panic inside burn's device thread (cudarc
/// panics when it cannot load libcuda).
#[cfg(feature = "cuda")]
pub fn probe_cuda() -> anyhow::Result<()> {
    use anyhow::{bail, Context};
    type CuInit = unsafe extern "C" fn(flags: u32) -> i32;
    type CuDeviceGetCount = unsafe extern "C" fn(count: *mut i32) -> i32;

    // SAFETY: loading the driver library runs its initialisers, which is what cudarc would do
    // next anyway; the two symbols have these C signatures in every CUDA driver API version.
    unsafe {
        let names: &[&str] =
            if cfg!(windows) { &["nvcuda.dll"] } else { &["libcuda.so.1", "libcuda.so"] };
        // Report why the first (canonical) name failed, not the fallback's error.
        let mut lib = libloading::Library::new(names[0]);
        for name in &names[1..] {
            if lib.is_err() {
                lib = libloading::Library::new(*name).or(lib);
            }
        }
        let lib =
            lib.context("--backend cuda: the NVIDIA driver library (libcuda) is not installed")?;
        let init: libloading::Symbol<CuInit> =
            lib.get(b"cuInit\0").context("--backend cuda: libcuda has no cuInit")?;
        let status = init(0);
        if status != 0 {
            bail!("--backend cuda: cuInit failed with CUresult {status} (no usable NVIDIA GPU?)");
        }
        let count_fn: libloading::Symbol<CuDeviceGetCount> = lib
            .get(b"cuDeviceGetCount\0")
            .context("--backend cuda: libcuda has no cuDeviceGetCount")?;
        let mut count = 0;
        let status = count_fn(&mut count);
        if status != 0 || count == 0 {
            bail!("--backend cuda: the NVIDIA driver reports no GPU (CUresult {status})");
        }
    }
    Ok(())
}
