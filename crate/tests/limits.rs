//! A model whose buffers exceed the adapter's limits is refused before any weight is read,
//! with a typed error naming the tensor and the limit.

mod common;
use ferrolm::engine::{Engine, LoadOptions};
use ferrolm::gpu::block_on;
use ferrolm::synth::{self, SynthOptions};
use ferrolm::weights::gguf::GgufFile;
use ferrolm::weights::quant::GgmlType;
use ferrolm::weights::{ByteSource, FileSource};
use ferrolm::Error;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counts reads of tensor data (reads that start past the header; the header itself is fetched
/// as a prefix that may run into the data), to prove no weights were fetched.
struct Counting {
    inner: FileSource,
    data_offset: u64,
    weight_bytes: AtomicU64,
}

impl ByteSource for Counting {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> ferrolm::Result<()> {
        if offset >= self.data_offset {
            self.weight_bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
        }
        self.inner.read_at(offset, buf)
    }
    fn name(&self) -> String {
        self.inner.name()
    }
}

#[test]
fn oversized_matrices_are_refused_before_download() {
    // Llama-3.1-8B's 128256 x 4096 embedding in Q8_0 is ~530 MB in one buffer: more than
    // lavapipe's and the browsers' default 128 MiB binding (on big native GPUs it may fit).
    let shape = synth::shape("llama-3.1-8b").unwrap();
    let opts = SynthOptions { shape, ty: GgmlType::Q8_0, seed: 1, layers: Some(1), sparse: true };
    let model = common::SynthModel::write("limits-big", &opts);
    let inner = FileSource::open(&model.path).unwrap();
    let data_offset = GgufFile::read(&inner).unwrap().data_offset;
    let src = Counting { inner, data_offset, weight_bytes: AtomicU64::new(0) };
    let res = block_on(Engine::load(&src, &LoadOptions::default(), &mut |_, _, _| {}));
    match res {
        Err(Error::Limits(msg)) => {
            assert!(msg.contains("token_embd") || msg.contains("output"), "{msg}");
            assert_eq!(src.weight_bytes.load(Ordering::Relaxed), 0, "weights were read before the refusal");
        }
        Err(e) => panic!("expected a limits error, got {e}"),
        Ok(e) => eprintln!(
            "skipping: this adapter's binding limit ({} MiB) holds the model",
            e.rt.gpu.limits.max_storage_buffer_binding_size >> 20
        ),
    }
}

#[test]
fn contexts_past_the_attention_merge_are_refused_before_loading() {
    let mut shape = synth::shape("smollm2-135m").unwrap();
    shape.vocab = 512;
    let opts = SynthOptions { shape, ty: GgmlType::Q4_0, seed: 1, layers: Some(1), sparse: false };
    let model = common::SynthModel::write("limits-ctx", &opts);
    let inner = FileSource::open(&model.path).unwrap();
    let data_offset = GgufFile::read(&inner).unwrap().data_offset;
    let src = Counting { inner, data_offset, weight_bytes: AtomicU64::new(0) };
    let max = ferrolm::model::forward::MAX_CONTEXT;
    let load = |n: usize| {
        let opts = LoadOptions { context_length: Some(n), ..Default::default() };
        block_on(Engine::load(&src, &opts, &mut |_, _, _| {}))
    };
    match load(max + 1) {
        Err(Error::InvalidOption(msg)) => assert!(msg.contains("decode attention merges"), "{msg}"),
        Err(e) => panic!("expected an invalid-option error, got {e}"),
        Ok(_) => panic!("a {}-token context was accepted", max + 1),
    }
    assert_eq!(src.weight_bytes.load(Ordering::Relaxed), 0, "weights were read before the refusal");
    // The largest context it merges loads and decodes.
    let mut engine = load(max).unwrap();
    let opts = ferrolm::engine::GenerateOptions { max_tokens: 2, ..Default::default() };
    let out_tokens = block_on(engine.generate(&[1, 2, 3], &opts, &mut |_, _| true)).unwrap().tokens;
    assert_eq!(out_tokens.len(), 2);
    // A default-sized context grows for long prompts up to that limit; one past it is refused
    // naming the limit, not the context it started from.
    let mut engine = block_on(Engine::load(&src, &LoadOptions::default(), &mut |_, _, _| {})).unwrap();
    let long = vec![1u32; max + 5];
    match block_on(engine.generate(&long, &opts, &mut |_, _| true)) {
        Err(Error::ContextOverflow { tokens, context, .. }) => assert_eq!((tokens, context), (max + 5, max)),
        Err(e) => panic!("expected a context overflow, got {e}"),
        Ok(_) => panic!("a {}-token prompt was accepted", max + 5),
    }
}

/// A lost device (here destroyed on purpose, as a driver reset or the browser would) fails the
/// generation in progress and every later call with `Error::DeviceLost`, never a hang or panic.
#[test]
fn a_lost_device_fails_every_later_call() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/arch/llama/model.gguf");
    let mut engine = block_on(Engine::load_path(&path, &LoadOptions::default(), &mut |_, _, _| {})).unwrap();
    let opts = ferrolm::generation::GenerateOptions { max_tokens: 4, ..Default::default() };
    let ok = block_on(engine.generate(&[1, 2, 3], &opts, &mut |_, _| true)).unwrap();
    assert!(!ok.tokens.is_empty());

    let mut g = block_on(engine.start(&[1, 2, 3], &opts)).unwrap();
    engine.rt.gpu.device.destroy();
    let mid = (0..8).map(|_| block_on(engine.step(&mut g))).find(|r| r.is_err());
    assert!(matches!(mid, Some(Err(Error::DeviceLost(_)))), "{mid:?}");
    for _ in 0..2 {
        let r = block_on(engine.generate(&[1, 2, 3], &opts, &mut |_, _| true));
        match r {
            Err(e @ Error::DeviceLost(_)) => assert_eq!(e.kind(), "DeviceLostError"),
            other => panic!("expected DeviceLost, got {other:?}"),
        }
    }
}
