//! Arbitrary bytes into the GGUF header parser: it must return, Ok or Err, without panicking.
#![no_main]

use ferrolm::weights::gguf::GgufFile;
use ferrolm::weights::MemSource;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let src = MemSource::new(data.to_vec(), "fuzz.gguf");
    if let Err(e) = GgufFile::read(&src) {
        // Formatting runs every message's code path too.
        let _ = e.to_string();
    }
});
