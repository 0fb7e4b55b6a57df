//! Streaming SHA-256 for the npm package: the download layer feeds the model file to it chunk by
//! chunk (in file order) while it streams into the engine, so a `sha256` given to `createEngine`
//! is checked without holding the file in memory. (WebCrypto has no incremental digest.)

use sha2::{Digest, Sha256};
use wasm_bindgen::prelude::*;

#[wasm_bindgen]
pub struct Sha256Hasher {
    inner: Option<Sha256>,
    bytes: u64,
}

impl Default for Sha256Hasher {
    fn default() -> Self {
        Self::new()
    }
}

#[wasm_bindgen]
impl Sha256Hasher {
    #[wasm_bindgen(constructor)]
    pub fn new() -> Sha256Hasher {
        Sha256Hasher { inner: Some(Sha256::new()), bytes: 0 }
    }

    /// Feed the next bytes of the stream.
    pub fn update(&mut self, data: &[u8]) -> Result<(), JsValue> {
        let h = self.inner.as_mut().ok_or_else(|| JsValue::from_str("Sha256Hasher: update() after digest()"))?;
        h.update(data);
        self.bytes += data.len() as u64;
        Ok(())
    }

    /// Bytes fed so far.
    #[wasm_bindgen(getter)]
    pub fn length(&self) -> f64 {
        self.bytes as f64
    }

    /// Finish and return the lowercase hex digest (the hasher cannot be used afterwards).
    #[wasm_bindgen(js_name = digestHex)]
    pub fn digest_hex(&mut self) -> Result<String, JsValue> {
        let h = self.inner.take().ok_or_else(|| JsValue::from_str("Sha256Hasher: digest() called twice"))?;
        Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
    }
}
