//! The few browser globals the demo needs, taken from whichever scope the code runs in: the page
//! (`Window`) or the inference worker (`DedicatedWorkerGlobalScope`). Both have `fetch`,
//! `caches`, `setTimeout` and `performance`, but web-sys reaches them through different types.

use js_sys::{Function, Promise, Reflect};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

fn global(name: &str) -> JsValue {
    Reflect::get(&js_sys::global(), &JsValue::from_str(name)).unwrap_or(JsValue::UNDEFINED)
}

/// `fetch(url)` in this scope.
pub async fn fetch(url: &str) -> Result<JsValue, JsValue> {
    let fetch: Function = global("fetch").dyn_into()?;
    let promise: Promise = fetch.call1(&js_sys::global(), &JsValue::from_str(url))?.dyn_into()?;
    JsFuture::from(promise).await
}

/// The Cache API of this scope; absent outside secure contexts (https, localhost).
pub fn caches() -> Option<web_sys::CacheStorage> {
    global("caches").dyn_into().ok()
}

/// Yields to the event loop for `ms` (0: just long enough for waiting events, such as messages
/// and input, to run).
pub async fn sleep(ms: i32) {
    let promise = Promise::new(&mut |resolve, _| {
        if let Ok(set_timeout) = global("setTimeout").dyn_into::<Function>() {
            let _ = set_timeout.call2(&JsValue::NULL, &resolve, &JsValue::from(ms));
        }
    });
    let _ = JsFuture::from(promise).await;
}

/// `performance.now()`, in milliseconds.
pub fn now_ms() -> f64 {
    let performance = global("performance");
    Reflect::get(&performance, &"now".into())
        .ok()
        .and_then(|now| now.dyn_into::<Function>().ok())
        .and_then(|now| now.call0(&performance).ok())
        .and_then(|t| t.as_f64())
        .unwrap_or(0.0)
}

/// Logs `timing: WHAT at T ms` (T: `performance.now()`), the form `make web-bench` prints.
pub fn log_timing(what: &str) {
    web_sys::console::log_1(&format!("timing: {what} at {:.0} ms", now_ms()).into());
}
