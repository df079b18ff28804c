//! The inference worker's entry point (built by trunk as a worker; see `index.html`): the page
//! spawns it and it runs every model call, off the page's thread (`web::worker`).

#[cfg(target_arch = "wasm32")]
fn main() {
    console_error_panic_hook::set_once();
    web::worker::run();
}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    eprintln!("the inference worker runs in the browser: `make demo` builds and serves it");
}
