//! Whatever the parser accepts must be fully usable: every tensor's bytes read back, and the file
//! rewritten by `GgufWriter` must parse to the same metadata and tensors.
#![no_main]

use ferrolm::weights::gguf::GgufFile;
use ferrolm::weights::gguf_write::GgufWriter;
use ferrolm::weights::MemSource;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let src = MemSource::new(data.to_vec(), "fuzz.gguf");
    let Ok(f) = GgufFile::read(&src) else { return };
    let mut w = GgufWriter::new();
    w.version(f.version);
    for (k, v) in &f.metadata {
        w.add(k.clone(), v.clone()).expect("a parsed value must be writable");
    }
    for t in &f.tensors {
        let bytes = f.read_tensor(&src, t).expect("a validated tensor must be readable");
        assert_eq!(bytes.len() as u64, t.n_bytes);
        w.add_tensor(t.name.clone(), &t.dims, t.ty, bytes).expect("a parsed tensor must be writable");
    }
    let out = w.to_bytes().expect("writing to memory cannot fail");
    let src2 = MemSource::new(out, "rewritten.gguf");
    let g = GgufFile::read(&src2).unwrap_or_else(|e| panic!("rewritten file refused: {e}"));
    // Debug strings compare NaN payload-insensitively but otherwise exactly.
    assert_eq!(format!("{:?}", f.metadata), format!("{:?}", g.metadata));
    assert_eq!(f.tensors.len(), g.tensors.len());
    for (a, b) in f.tensors.iter().zip(&g.tensors) {
        assert_eq!((&a.name, &a.dims, a.ty), (&b.name, &b.dims, b.ty));
        assert_eq!(f.read_tensor(&src, a).unwrap(), g.read_tensor(&src2, b).unwrap());
    }
});
