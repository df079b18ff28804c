//! Entry point of the browser demo (built by trunk; see `index.html`).

#[cfg(target_arch = "wasm32")]
fn main() {
    console_error_panic_hook::set_once();
    leptos::mount::mount_to_body(web::app::App);
}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    eprintln!("the demo runs in the browser: `make demo` builds and serves it");
}
