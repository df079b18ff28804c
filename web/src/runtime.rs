//! Which backend runs the model in this browser: burn-wgpu on WebGPU when the browser hands out a
//! working adapter, burn-ndarray on the CPU otherwise.
//!
//! burn-wgpu (cubecl-wgpu) sets a device up synchronously on first use, and that panics on wasm;
//! it also panics when no adapter is found. A panic kills the whole wasm module, so WebGPU is set
//! up here, asynchronously, and only after the browser itself has returned an adapter from
//! `navigator.gpu.requestAdapter()`. A tiny computation read back from the device then confirms
//! that kernels really run before the demo relies on them.

#[cfg(target_arch = "wasm32")]
use burn::backend::wgpu::WgpuDevice;

/// The model's backend on WebGPU.
#[cfg(target_arch = "wasm32")]
pub type Gpu = burn::backend::Wgpu<f32, i32>;
/// The model's backend on the CPU (single-threaded; wasm SIMD128 in the browser, and relaxed
/// SIMD's fused multiply-adds in the worker's second build).
pub type Cpu = burn::backend::NdArray<f32>;

/// Where the model runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Runtime {
    /// burn-wgpu on the browser's WebGPU; the device is set up and ready.
    #[cfg(target_arch = "wasm32")]
    WebGpu(WgpuDevice),
    /// burn-ndarray on the CPU.
    Cpu,
}

impl Runtime {
    /// For people: `"WebGPU"`, or the CPU and which of the worker's builds runs (the e2e test
    /// reads it): relaxed SIMD's fused multiply-adds where the browser has them.
    pub fn label(&self) -> &'static str {
        match self {
            #[cfg(target_arch = "wasm32")]
            Runtime::WebGpu(_) => "WebGPU",
            Runtime::Cpu if cfg!(feature = "relaxed-simd") => "CPU (ndarray, relaxed SIMD)",
            Runtime::Cpu => "CPU (ndarray, SIMD128)",
        }
    }

    /// For the page and its tests (`#runtime[data-runtime]`): `"webgpu"` or `"cpu"`.
    pub fn id(&self) -> &'static str {
        match self {
            #[cfg(target_arch = "wasm32")]
            Runtime::WebGpu(_) => "webgpu",
            Runtime::Cpu => "cpu",
        }
    }
}

/// Picks the runtime: WebGPU when available and working, else the CPU, with the reason for the
/// fallback (`None` when WebGPU was chosen). `force_cpu` (the page's `?backend=cpu`) skips WebGPU.
///
/// WebGPU is set up once per page; later calls return the same device (or the same reason).
pub async fn select(force_cpu: bool) -> (Runtime, Option<String>) {
    if force_cpu {
        return (Runtime::Cpu, Some("the CPU backend was requested (?backend=cpu)".into()));
    }
    #[cfg(target_arch = "wasm32")]
    match webgpu().await {
        Ok(device) => (Runtime::WebGpu(device), None),
        Err(reason) => (Runtime::Cpu, Some(reason)),
    }
    #[cfg(not(target_arch = "wasm32"))]
    (Runtime::Cpu, Some("WebGPU is only used in the browser".into()))
}

#[cfg(target_arch = "wasm32")]
async fn webgpu() -> Result<WgpuDevice, String> {
    use std::cell::RefCell;

    thread_local! {
        // The outcome of the one set-up: cubecl registers a device's client once, and a second
        // registration of the same device would panic.
        static OUTCOME: RefCell<Option<Result<WgpuDevice, String>>> = const { RefCell::new(None) };
    }
    if let Some(outcome) = OUTCOME.with(|o| o.borrow().clone()) {
        return outcome;
    }
    let outcome = browser::set_up().await;
    OUTCOME.with(|o| *o.borrow_mut() = Some(outcome.clone()));
    outcome
}

#[cfg(target_arch = "wasm32")]
mod browser {
    use burn::backend::wgpu::{graphics::WebGpu, init_setup_async, RuntimeOptions, WgpuDevice};
    use burn::tensor::Tensor;
    use js_sys::{Array, Function, Object, Promise, Reflect};
    use wasm_bindgen::{JsCast, JsValue};
    use wasm_bindgen_futures::JsFuture;

    use super::Gpu;

    /// How long the browser may take to answer `requestAdapter()` before we give up on WebGPU
    /// (some headless set-ups never answer).
    const ADAPTER_TIMEOUT_MS: i32 = 10_000;

    pub(super) async fn set_up() -> Result<WgpuDevice, String> {
        probe_adapter().await?;
        let device = WgpuDevice::DefaultDevice;
        init_setup_async::<WebGpu>(&device, RuntimeOptions::default()).await;
        smoke_test(&device).await?;
        Ok(device)
    }

    /// `await navigator.gpu.requestAdapter({powerPreference: "high-performance"})` (the options
    /// wgpu itself uses), as an error message when there is no adapter.
    async fn probe_adapter() -> Result<(), String> {
        let get = |target: &JsValue, key: &str| {
            Reflect::get(target, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
        };
        let navigator = get(&js_sys::global(), "navigator");
        let gpu = get(&navigator, "gpu");
        if gpu.is_undefined() || gpu.is_null() {
            return Err("this browser has no WebGPU (navigator.gpu is missing)".into());
        }
        let request: Function = get(&gpu, "requestAdapter")
            .dyn_into()
            .map_err(|_| "navigator.gpu.requestAdapter is not a function")?;
        let options = Object::new();
        let _ = Reflect::set(&options, &"powerPreference".into(), &"high-performance".into());
        let adapter: Promise = request
            .call1(&gpu, &options)
            .map_err(|e| format!("navigator.gpu.requestAdapter() threw: {}", describe(&e)))?
            .dyn_into()
            .map_err(|_| "navigator.gpu.requestAdapter() did not return a promise")?;
        let timeout = JsValue::from_str("timeout");
        let race =
            Promise::race(&Array::of2(&adapter, &resolve_after(ADAPTER_TIMEOUT_MS, &timeout)));
        let adapter = JsFuture::from(race)
            .await
            .map_err(|e| format!("navigator.gpu.requestAdapter() failed: {}", describe(&e)))?;
        if adapter == timeout {
            return Err(format!(
                "navigator.gpu.requestAdapter() did not answer within {ADAPTER_TIMEOUT_MS} ms"
            ));
        }
        if adapter.is_null() || adapter.is_undefined() {
            return Err(
                "WebGPU is present but navigator.gpu.requestAdapter() returned no adapter".into()
            );
        }
        Ok(())
    }

    /// A promise that resolves to `value` after `ms` milliseconds.
    fn resolve_after(ms: i32, value: &JsValue) -> Promise {
        let value = value.clone();
        Promise::new(&mut |resolve, _reject| {
            let set_timeout = Reflect::get(&js_sys::global(), &"setTimeout".into())
                .ok()
                .and_then(|f| f.dyn_into::<Function>().ok());
            let resolve = resolve.bind1(&JsValue::NULL, &value);
            // Without timers (not in a page or worker) the probe simply never times out.
            if let Some(set_timeout) = set_timeout {
                let _ = set_timeout.call2(&JsValue::NULL, &resolve, &JsValue::from(ms));
            }
        })
    }

    /// `2 * [1, 2, 3]` on the device, read back: kernels compile, run and return data.
    async fn smoke_test(device: &WgpuDevice) -> Result<(), String> {
        let doubled = Tensor::<Gpu, 1>::from_floats([1.0, 2.0, 3.0], device).mul_scalar(2.0);
        let data = doubled
            .into_data_async()
            .await
            .map_err(|e| format!("WebGPU readback failed: {e:?}"))?;
        let values = data.to_vec::<f32>().map_err(|e| format!("WebGPU readback failed: {e:?}"))?;
        if values != [2.0, 4.0, 6.0] {
            return Err(format!("WebGPU computed 2 * [1, 2, 3] = {values:?}"));
        }
        Ok(())
    }

    fn describe(e: &JsValue) -> String {
        e.as_string()
            .or_else(|| e.dyn_ref::<js_sys::Error>().map(|e| String::from(e.message())))
            .unwrap_or_else(|| format!("{e:?}"))
    }
}
