//! The loader reads a GGUF file forward, so the browser's downloader (pkg-template/store.js:
//! 16 MiB chunks over Range requests, the last three kept in memory, one read ahead) fetches each
//! byte about once even without a cache. The reads the engine makes while loading the default
//! model are replayed through a model of that downloader.

mod common;
use ferrolm::engine::Engine;
use ferrolm::gpu::block_on;
use ferrolm::weights::{ByteSource, FileSource};
use std::sync::Mutex;

struct Recording {
    inner: FileSource,
    reads: Mutex<Vec<(u64, usize)>>,
}

impl ByteSource for Recording {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> ferrolm::Result<()> {
        self.reads.lock().unwrap().push((offset, buf.len()));
        self.inner.read_at(offset, buf)
    }
    fn name(&self) -> String {
        self.inner.name()
    }
}

/// store.js SMALL_READ: a read this small whose chunk is not in memory fetches just its bytes.
const SMALL_READ: usize = 256 << 10;

/// Bytes store.js would download for these reads with `cache: 'none'` (ModelSource.readInner and
/// ChunkPool: chunks of `chunk` bytes, first-in first-out, `keep` of them).
fn downloaded(reads: &[(u64, usize)], size: u64, chunk: u64, keep: usize) -> u64 {
    let n = size.div_ceil(chunk);
    let mut pool: std::collections::VecDeque<u64> = Default::default();
    let mut fetched = 0;
    let get = |i: u64, pool: &mut std::collections::VecDeque<u64>, fetched: &mut u64| {
        if !pool.contains(&i) {
            *fetched += chunk.min(size - i * chunk);
            pool.push_back(i);
            if pool.len() > keep {
                pool.pop_front();
            }
        }
    };
    for (k, &(offset, len)) in reads.iter().enumerate() {
        let i0 = offset / chunk;
        // The very first read is the header, which comes with chunk 0 (store.js `first`).
        let same_chunk = (offset + len as u64 - 1) / chunk == i0;
        if k > 0 && len > 0 && len <= SMALL_READ && same_chunk && !pool.contains(&i0) {
            fetched += len as u64;
            continue;
        }
        let mut at = 0u64;
        while at < len as u64 {
            let pos = offset + at;
            let i = pos / chunk;
            let header = i == 0 && len < 1 << 20;
            if i + 1 < n && !header {
                get(i + 1, &mut pool, &mut fetched);
            }
            get(i, &mut pool, &mut fetched);
            at += (chunk - pos % chunk).min(len as u64 - at);
        }
    }
    fetched
}

fn check(path: &std::path::Path) {
    let src = Recording { inner: FileSource::open(path).unwrap(), reads: Mutex::new(Vec::new()) };
    block_on(Engine::load(&src, &Default::default(), &mut |_, _, _| {})).unwrap();
    let reads = src.reads.lock().unwrap().clone();
    let size = src.len();
    let got = downloaded(&reads, size, 16 << 20, 3);
    eprintln!(
        "{} reads; a cacheless browser load would fetch {got} of {size} bytes ({:.3}x)",
        reads.len(),
        got as f64 / size as f64
    );
    assert!(got as f64 <= 1.01 * size as f64, "{}: {:.3}x the file", path.display(), got as f64 / size as f64);
}

#[test]
fn loading_reads_the_file_forward() {
    // The default model, the real Q4_K_M file (its norms sit apart from their layers), and
    // make-gguf files (every norm at the start; an untied LM head at the end).
    if let Some(path) = common::model_path() {
        check(&path);
    }
    if let Some(path) = common::parity::gemma3_path() {
        check(&path);
    }
    for (name, layers) in [("llama-3.2-1b", 4), ("phi-3-mini", 2)] {
        let shape = ferrolm::synth::Shape { vocab: 4096, ..ferrolm::synth::shape(name).unwrap() };
        let ty = ferrolm::weights::quant::GgmlType::Q4_0;
        let opts = ferrolm::synth::SynthOptions { shape, ty, seed: 3, layers: Some(layers), sparse: true };
        let model = common::SynthModel::write(&format!("load-order-{name}"), &opts);
        check(&model.path);
    }
}
