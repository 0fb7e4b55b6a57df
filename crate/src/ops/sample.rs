//! Sampling on the GPU (shaders/sample.wgsl): the scratch layout its phases share, their
//! override constants and grids, and the per-generation parameters. The decode step records the
//! seven phases after the LM head in place of greedy's argmax, so a sampled decode stays one
//! submit a token with one id read back, pipelined like greedy.

use super::{Grid, Recorder};
use crate::gpu::Kernel;
use crate::sampler::SamplingParams;

/// Tokens per workgroup of the phases that split the vocabulary (sample.wgsl CHUNK).
pub const CHUNK: usize = 4096;
/// Histogram bins (sample.wgsl BINS).
const BINS: usize = 256;
/// Largest list of tokens gathered from one bin (sample.wgsl CAP; two lists are sorted in
/// 4 KiB of workgroup memory each).
const CAP: usize = 512;
const HDR: usize = 16;
/// Phases, in order (sample.wgsl PHASE), and whether each runs over the vocabulary (NW
/// workgroups) or in one workgroup.
pub const PHASES: [(u32, bool); 7] = [(1, true), (2, true), (3, false), (4, true), (5, false), (6, true), (7, false)];
/// The phases' names in profiles.
const LABELS: [&str; 7] =
    ["sample max", "sample hist", "sample select", "sample gather", "sample cut", "sample draw", "sample pick"];

/// Word offsets of the scratch buffer's parts, for a vocabulary of `vocab` tokens.
#[derive(Clone, Copy, Debug)]
pub struct SampleLayout {
    pub vocab: usize,
    /// Workgroups of the vocabulary-wide phases.
    pub nw: usize,
    pen: usize,
    cnt: usize,
    bias: usize,
    wmax: usize,
    hist: usize,
    cum: usize,
    hdr: usize,
    list: usize,
    draw: usize,
    /// Words of the whole buffer.
    pub words: usize,
}

impl SampleLayout {
    pub fn new(vocab: usize) -> SampleLayout {
        let nw = vocab.div_ceil(CHUNK).max(1);
        let pen = 0;
        let cnt = pen + vocab.div_ceil(32);
        let bias = cnt + vocab;
        let wmax = bias + vocab;
        let hist = wmax + nw;
        let cum = hist + nw * BINS * 2;
        let hdr = cum + BINS;
        let list = hdr + HDR;
        let draw = list + 2 * CAP * 2;
        let words = draw + nw * 2;
        SampleLayout { vocab, nw, pen, cnt, bias, wmax, hist, cum, hdr, list, draw, words }
    }

    /// Override constants of phase `phase`.
    pub fn consts(&self, phase: u32) -> Vec<(&'static str, f64)> {
        vec![
            ("PHASE", phase as f64),
            ("V", self.vocab as f64),
            ("NW", self.nw as f64),
            ("CAP", CAP as f64),
            ("OFF_PEN", self.pen as f64),
            ("OFF_CNT", self.cnt as f64),
            ("OFF_BIAS", self.bias as f64),
            ("OFF_WMAX", self.wmax as f64),
            ("OFF_HIST", self.hist as f64),
            ("OFF_CUM", self.cum as f64),
            ("OFF_HDR", self.hdr as f64),
            ("OFF_LIST", self.list as f64),
            ("OFF_DRAW", self.draw as f64),
        ]
    }

    /// Byte offset of the penalty set (one bit a token) in the scratch buffer.
    pub fn pen_offset_bytes(&self) -> u64 {
        self.pen as u64 * 4
    }

    /// The penalty set of a context: bit t of word t / 32 for every token t in `history`.
    pub fn pen_bits(&self, history: &[u32]) -> Vec<u32> {
        let mut bits = vec![0u32; self.vocab.div_ceil(32)];
        for &t in history.iter().filter(|&&t| (t as usize) < self.vocab) {
            bits[t as usize / 32] |= 1 << (t % 32);
        }
        bits
    }

    /// Byte offset of the per-token counts (frequency and presence penalties).
    pub fn cnt_offset_bytes(&self) -> u64 {
        self.cnt as u64 * 4
    }

    /// Times each token was generated so far (`generated`): the counts' words.
    pub fn counts(&self, generated: &[u32]) -> Vec<u32> {
        let mut c = vec![0u32; self.vocab];
        for &t in generated.iter().filter(|&&t| (t as usize) < self.vocab) {
            c[t as usize] += 1;
        }
        c
    }

    /// Byte offset of the dense logit bias.
    pub fn bias_offset_bytes(&self) -> u64 {
        self.bias as u64 * 4
    }

    /// The logit bias of every token (0 where `bias` does not name it; a token named twice
    /// gets the sum, as `SamplingParams::adjust` adds each pair).
    pub fn bias(&self, bias: &[(u32, f32)]) -> Vec<f32> {
        let mut b = vec![0f32; self.vocab];
        for &(t, x) in bias.iter().filter(|(t, _)| (*t as usize) < self.vocab) {
            b[t as usize] += x;
        }
        b
    }
}

/// Bytes of the phases' uniform parameters (sample.wgsl `Params`, padded to 16).
pub const PARAMS_BYTES: usize = 48;

/// The phases' uniform parameters (sample.wgsl `Params`).
pub fn params_bytes(p: &SamplingParams) -> [u8; PARAMS_BYTES] {
    let greedy = p.is_greedy();
    let mut flags = 0u32;
    if p.repetition_penalty != 1.0 {
        flags |= 1;
    }
    if p.top_k > 0 {
        flags |= 2;
    }
    if p.top_p < 1.0 {
        flags |= 4;
    }
    if greedy {
        flags |= 8;
    }
    if !p.logit_bias.is_empty() {
        flags |= 16;
    }
    if p.frequency_penalty != 0.0 || p.presence_penalty != 0.0 {
        flags |= 32;
    }
    let min_d = if p.min_p > 0.0 { -(p.min_p as f64).ln() as f32 } else { 3.4e38 };
    let words: [u32; PARAMS_BYTES / 4] = [
        (if greedy { 0.0 } else { 1.0 / p.temperature }).to_bits(),
        p.top_p.to_bits(),
        min_d.to_bits(),
        p.repetition_penalty.to_bits(),
        p.top_k.min(u32::MAX as usize) as u32,
        p.seed as u32,
        (p.seed >> 32) as u32,
        flags,
        p.frequency_penalty.to_bits(),
        p.presence_penalty.to_bits(),
        0,
        0,
    ];
    bytemuck::cast(words)
}

/// Greedy: the token with the largest logit (the first on ties, as torch.argmax) from the LM
/// head's `parts` per-workgroup (max, index) pairs after the `vocab` logits, into `ids[0]` (the
/// next step's input) and the step's ring slot of `tokens`.
pub fn argmax(
    r: &mut Recorder,
    vocab: usize,
    parts: u32,
    logits: &wgpu::Buffer,
    ids: &wgpu::Buffer,
    tokens: &wgpu::Buffer,
) {
    let consts = [("V", vocab as f64), ("P", parts as f64)];
    r.push("argmax", Kernel::Argmax, &consts, &[(0, logits), (1, ids), (2, tokens)], Grid::Fixed(1));
}

/// A constraint's allowed tokens (one bit each in `bits`): every other logit to -inf.
pub fn mask(r: &mut Recorder, vocab: usize, logits: &wgpu::Buffer, bits: &wgpu::Buffer) {
    r.push("mask", Kernel::Mask, &[("V", vocab as f64)], &[(0, logits), (1, bits)], Grid::Elems(vocab as u32));
}

/// The sampler's buffers: logits in, the token out (`ids[0]` and the ring slot of `tokens`), the
/// scratch `state` (`SampleLayout`), the `params` uniform (`params_bytes`) and its counters.
pub struct Sample<'a> {
    pub logits: &'a wgpu::Buffer,
    pub ids: &'a wgpu::Buffer,
    pub tokens: &'a wgpu::Buffer,
    pub state: &'a wgpu::Buffer,
    pub params: &'a wgpu::Buffer,
    pub counters: &'a wgpu::Buffer,
}

/// Every phase of sample.wgsl, in order.
pub fn sample(r: &mut Recorder, vocab: usize, s: Sample) {
    let sl = SampleLayout::new(vocab);
    let bufs = [(0, s.logits), (1, s.ids), (2, s.tokens), (3, s.state), (4, s.params), (6, s.counters)];
    for ((phase, wide), label) in PHASES.into_iter().zip(LABELS) {
        let grid = Grid::Fixed(if wide { sl.nw as u32 } else { 1 });
        r.push(label, Kernel::Sample, &sl.consts(phase), &bufs, grid);
    }
}
