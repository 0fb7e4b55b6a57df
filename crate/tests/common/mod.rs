//! Shared test helpers: a seeded PRNG (fresh seed per run, printed; FERROLM_SEED reproduces),
//! GPU buffers from slices, and the default model's path.
#![allow(dead_code)]

pub mod parity;

use ferrolm::gpu::Gpu;
use ferrolm::sampler::Rng;

pub fn seed() -> u64 {
    let s = std::env::var("FERROLM_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    eprintln!("seed {s} (set FERROLM_SEED={s} to reproduce)");
    s
}

pub struct R(pub Rng);

impl R {
    pub fn new() -> R {
        R(Rng::new(seed()))
    }
    pub fn f(&mut self) -> f32 {
        (self.0.next_f64() * 2.0 - 1.0) as f32
    }
    pub fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f()).collect()
    }
    pub fn u32(&mut self) -> u32 {
        self.0.next_u64() as u32
    }
    pub fn below(&mut self, n: u32) -> u32 {
        (self.0.next_u64() % n as u64) as u32
    }
}

pub fn gpu() -> Gpu {
    ferrolm::gpu::block_on(Gpu::new()).expect("a GPU adapter (install mesa-vulkan-drivers for lavapipe)")
}

pub fn buf_f32(g: &Gpu, v: &[f32]) -> wgpu::Buffer {
    g.buffer_init("test", bytemuck::cast_slice(v)).unwrap()
}

pub fn buf_u32(g: &Gpu, v: &[u32]) -> wgpu::Buffer {
    g.buffer_init("test", bytemuck::cast_slice(v)).unwrap()
}

/// An output buffer filled with NaN so that anything the kernel fails to write shows up.
pub fn poisoned(g: &Gpu, n: usize) -> wgpu::Buffer {
    buf_f32(g, &vec![f32::NAN; n])
}

pub fn read(g: &Gpu, b: &wgpu::Buffer, n: usize) -> Vec<f32> {
    ferrolm::gpu::block_on(g.read_f32(b, n)).unwrap()
}

pub fn read_u32(g: &Gpu, b: &wgpu::Buffer, n: usize) -> Vec<u32> {
    let bytes = ferrolm::gpu::block_on(g.read_buffer(b, n as u64 * 4)).unwrap();
    bytemuck::pod_collect_to_vec(&bytes)
}

/// |a - b| <= atol + rtol * |b| everywhere; reports the worst element.
pub fn assert_close(got: &[f32], want: &[f32], atol: f32, rtol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut worst = (0usize, 0f32);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (g - w).abs();
        assert!(g.is_finite(), "{what}: element {i} is {g} (want {w})");
        let excess = err - (atol + rtol * w.abs());
        if excess > worst.1 {
            worst = (i, excess);
        }
    }
    let i = worst.0;
    assert!(worst.1 <= 0.0, "{what}: element {i}: got {} want {} (atol {atol}, rtol {rtol})", got[i], want[i]);
}

/// The default model, if present (CI fetches it; FERROLM_MODEL overrides the path).
pub fn model_path() -> Option<std::path::PathBuf> {
    let p = std::env::var("FERROLM_MODEL").map(std::path::PathBuf::from).unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_default();
        std::path::PathBuf::from(home).join(".cache/ferrolm/SmolLM2-135M-Instruct.Q4_1.gguf")
    });
    if p.exists() {
        Some(p)
    } else {
        eprintln!("skipping: model not found at {} (run `make model`)", p.display());
        None
    }
}

/// A random-weight GGUF written by `synth` (tokenizer from tests/fixtures/tokenizer/spm_tiny.gguf)
/// into its own temporary folder, removed on drop.
pub struct SynthModel {
    pub dir: std::path::PathBuf,
    pub path: std::path::PathBuf,
}

impl SynthModel {
    pub fn write(tag: &str, opts: &ferrolm::synth::SynthOptions) -> SynthModel {
        use ferrolm::weights::gguf::GgufFile;
        use ferrolm::weights::FileSource;
        let tok_path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tokenizer/spm_tiny.gguf");
        let tok = GgufFile::read(&FileSource::open(&tok_path).unwrap()).unwrap();
        let dir = std::env::temp_dir().join(format!("ferrolm-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{tag}.gguf"));
        ferrolm::synth::write(opts, &tok, &path, &mut |_| {}).unwrap();
        SynthModel { dir, path }
    }
}

impl Drop for SynthModel {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The default model's shape and real vocabulary (its tokenizer and chat template, from
/// `FERROLM_MODEL`) with 2 random Q8_0 layers: what a test of the engine's plumbing (sampling,
/// constraints, request checks) needs, at a quarter of a SmolLM2 token's cost. Parity with the
/// reference keeps the real weights (`parity.rs`). Written (in 0.4 s) once per test binary into
/// cargo's temporary folder, under the binary's name: never stale, never raced, never piling up;
/// `None` without the model.
pub fn small_smollm2() -> Option<std::path::PathBuf> {
    use ferrolm::weights::gguf::GgufFile;
    use ferrolm::weights::FileSource;
    static PATH: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let model = model_path()?;
        let exe = std::env::current_exe().ok()?;
        let name = exe.file_stem()?.to_string_lossy().into_owned();
        let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("smollm2-2layer-{name}.gguf"));
        let opts = ferrolm::synth::SynthOptions {
            shape: ferrolm::synth::shape("smollm2-135m").unwrap(),
            ty: ferrolm::synth::parse_type("q8_0").unwrap(),
            seed: 7,
            layers: Some(2),
            sparse: false,
        };
        let tok = GgufFile::read(&FileSource::open(&model).unwrap()).unwrap();
        ferrolm::synth::write(&opts, &tok, &path, &mut |_| {}).unwrap();
        Some(path)
    })
    .clone()
}

/// One tokenizer fixture case ({"text", "ids", "decoded"}): encode the text, then decode and
/// stream-decode the reference ids. Returns what went wrong. A case without "decoded" is only
/// encoded, unless `decoded_required`.
pub fn tokenizer_case_failures(
    tok: &ferrolm::tokenizer::Tokenizer,
    case: &serde_json::Value,
    decoded_required: bool,
) -> Vec<String> {
    let text = case["text"].as_str().unwrap();
    let want: Vec<u32> = case["ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
    let got = tok.encode(text).unwrap();
    if got != want {
        return vec![format!("encode {text:?}:\n  got  {got:?}\n  want {want:?}")];
    }
    let decoded = match case["decoded"].as_str() {
        Some(d) => d,
        None if decoded_required => return vec![format!("{text:?}: the fixture has no decoded text")],
        None => return Vec::new(),
    };
    let mut failures = Vec::new();
    let ours = tok.decode(&want).unwrap();
    if ours != decoded {
        failures.push(format!("decode {text:?}: got {ours:?}, want {decoded:?}"));
    }
    let mut s = tok.stream();
    let mut streamed = String::new();
    for &id in &want {
        streamed += &s.push(id).unwrap();
    }
    streamed += &s.finish().unwrap();
    if streamed != ours {
        failures.push(format!("stream {text:?}: got {streamed:?}, decode gave {ours:?}"));
    }
    failures
}
