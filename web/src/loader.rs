//! Downloads: the model index, the model bundles (weights with a progress callback) and the
//! optional AdvGLUE presets. Weights go through the Cache API, so a second visit starts offline;
//! the cache key carries the file size from the index, so a re-exported model is fetched anew.

use js_sys::{Reflect, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{Cache, Response};

/// The cache the weights live in; bump the suffix when the bundle format changes.
const CACHE_NAME: &str = "imbert-models-v1";

fn js_error(context: &str, e: JsValue) -> String {
    let detail =
        e.as_string().or_else(|| js_sys::JSON::stringify(&e).ok().and_then(|s| s.as_string()));
    format!("{context}: {}", detail.unwrap_or_else(|| "unknown error".into()))
}

async fn fetch_raw(url: &str) -> Result<Response, String> {
    crate::js::fetch(url)
        .await
        .map_err(|e| js_error(&format!("fetching {url}"), e))?
        .dyn_into()
        .map_err(|e| js_error("not a response", e))
}

async fn fetch_response(url: &str) -> Result<Response, String> {
    let response = fetch_raw(url).await?;
    if !response.ok() {
        return Err(format!("fetching {url}: HTTP {}", response.status()));
    }
    Ok(response)
}

/// A small file, as text; `None` on a 404 (optional files).
pub async fn fetch_text(url: &str, optional: bool) -> Result<Option<String>, String> {
    let response = fetch_raw(url).await?;
    if optional && response.status() == 404 {
        return Ok(None);
    }
    if !response.ok() {
        return Err(format!("fetching {url}: HTTP {}", response.status()));
    }
    let text = JsFuture::from(response.text().map_err(|e| js_error("reading", e))?)
        .await
        .map_err(|e| js_error(&format!("reading {url}"), e))?;
    Ok(text.as_string())
}

async fn open_cache() -> Option<Cache> {
    // The Cache API exists only in secure contexts (https, localhost); without it we just fetch.
    let caches = crate::js::caches()?;
    JsFuture::from(caches.open(CACHE_NAME)).await.ok()?.dyn_into().ok()
}

/// A file's bytes, from the cache when there, else from the network (then cached), reporting
/// `(received, total)` bytes as they arrive. Returns the bytes and whether they came from cache.
pub async fn fetch_bytes(
    url: &str,
    expected: u64,
    progress: impl Fn(u64, u64),
) -> Result<(Vec<u8>, bool), String> {
    let key = format!("{url}?bytes={expected}");
    let cache = open_cache().await;
    if let Some(cache) = &cache {
        if let Ok(hit) = JsFuture::from(cache.match_with_str(&key)).await {
            if let Ok(response) = hit.dyn_into::<Response>() {
                let bytes = read_body(&response, expected, &progress).await?;
                return Ok((bytes, true));
            }
        }
    }
    let response = fetch_response(url).await?;
    let total = response
        .headers()
        .get("content-length")
        .ok()
        .flatten()
        .and_then(|v| v.parse().ok())
        .unwrap_or(expected);
    if let Some(cache) = &cache {
        if let Ok(copy) = response.clone() {
            // Storing is best effort (quota, private mode): the page works without it.
            let _ = JsFuture::from(cache.put_with_str(&key, &copy)).await;
        }
    }
    Ok((read_body(&response, total, &progress).await?, false))
}

async fn read_body(
    response: &Response,
    total: u64,
    progress: &impl Fn(u64, u64),
) -> Result<Vec<u8>, String> {
    let body = response.body().ok_or("empty response body")?;
    let reader: web_sys::ReadableStreamDefaultReader =
        body.get_reader().dyn_into().map_err(|e| js_error("no stream reader", e.into()))?;
    let mut bytes = Vec::with_capacity(total as usize);
    loop {
        let chunk =
            JsFuture::from(reader.read()).await.map_err(|e| js_error("download interrupted", e))?;
        let done = Reflect::get(&chunk, &"done".into()).map(|d| d.is_truthy()).unwrap_or(true);
        if done {
            break;
        }
        let value: Uint8Array = Reflect::get(&chunk, &"value".into())
            .map_err(|e| js_error("bad chunk", e))?
            .dyn_into()
            .map_err(|e| js_error("bad chunk", e))?;
        let start = bytes.len();
        bytes.resize(start + value.length() as usize, 0);
        value.copy_to(&mut bytes[start..]);
        progress(bytes.len() as u64, total.max(bytes.len() as u64));
    }
    Ok(bytes)
}
