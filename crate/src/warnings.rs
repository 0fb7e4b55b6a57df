//! The crate's warnings (`log::warn!`: a file value ignored, a guess made) reach the user: on
//! stderr for the CLI, in the console in a browser. Only this crate's records: wgpu's and naga's
//! own logging stays with whatever logger an embedding application installs.

struct Sink;

impl log::Log for Sink {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::Level::Warn && m.target().starts_with("ferrolm")
    }

    fn log(&self, r: &log::Record) {
        if !self.enabled(r.metadata()) {
            return;
        }
        // Best effort: a stderr that cannot be written (a full disk) must not panic.
        #[cfg(not(target_arch = "wasm32"))]
        let _ = std::io::Write::write_fmt(&mut std::io::stderr(), format_args!("warning: {}\n", r.args()));
        #[cfg(target_arch = "wasm32")]
        {
            use wasm_bindgen::{JsCast, JsValue};
            let console = js_sys::Reflect::get(&js_sys::global(), &JsValue::from_str("console"));
            let warn = console.and_then(|c| js_sys::Reflect::get(&c, &JsValue::from_str("warn")).map(|w| (c, w)));
            if let Ok((c, w)) = warn {
                if let Some(f) = w.dyn_ref::<js_sys::Function>() {
                    let _ = f.call1(&c, &JsValue::from_str(&format!("ferrolm: {}", r.args())));
                }
            }
        }
    }

    fn flush(&self) {}
}

/// Route this crate's warnings to stderr (natively) or the console (wasm). Does nothing when the
/// process already has a logger.
pub fn install() {
    if log::set_logger(&Sink).is_ok() {
        log::set_max_level(log::LevelFilter::Warn);
    }
}
