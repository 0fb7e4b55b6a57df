//! The GPU sampler (shaders/sample.wgsl, model/sampling.rs) against a CPU reference of the same
//! rules as `sampler::Sampler`: on random logits, the tokens it may draw are exactly the ones the
//! CPU keeps after the penalty, top-k, top-p and min-p; its draws follow the CPU's probabilities;
//! cuts that leave one token draw the argmax; the penalty set grows with each draw. Then through
//! the engine: the same seed gives the same tokens, and greedy decoding with a repetition penalty
//! matches the CPU sampler token for token.

mod common;
use common::*;
use ferrolm::gpu::{Gpu, Kernel};
use ferrolm::ops::sample::{params_bytes, SampleLayout, PHASES};
use ferrolm::sampler::SamplingParams;

/// The GPU sampler's buffers for a vocabulary of `v` and `slots` draws a batch.
struct Rig {
    sl: SampleLayout,
    logits: wgpu::Buffer,
    ids: wgpu::Buffer,
    out: wgpu::Buffer,
    state: wgpu::Buffer,
    counters: wgpu::Buffer,
    params: wgpu::Buffer,
    slots: usize,
}

impl Rig {
    fn new(g: &Gpu, logits: &[f32], slots: usize) -> Rig {
        let sl = SampleLayout::new(logits.len());
        Rig {
            sl,
            logits: buf_f32(g, logits),
            ids: buf_u32(g, &[0; 4]),
            out: buf_u32(g, &vec![u32::MAX; slots]),
            state: buf_u32(g, &vec![0; sl.words]),
            counters: buf_u32(g, &[0; 4]),
            params: g.uniform("params", 32),
            slots,
        }
    }

    fn set(&self, g: &Gpu, p: &SamplingParams, history: &[u32]) {
        g.queue.write_buffer(&self.params, 0, &params_bytes(p));
        g.queue.write_buffer(&self.state, self.sl.pen_offset_bytes(), bytemuck::cast_slice(&self.sl.pen_bits(history)));
    }

    /// `slots` draws at positions pos0.., each the seven phases in order, in one submit.
    fn draw(&self, g: &Gpu, pos0: u32) -> Vec<u32> {
        let mut enc = g.device.create_command_encoder(&Default::default());
        let steps: Vec<wgpu::Buffer> = (0..self.slots)
            .map(|i| {
                let b = g.uniform("step", 16);
                g.queue.write_buffer(&b, 0, bytemuck::cast_slice(&[1u32, pos0 + i as u32, i as u32, 0]));
                b
            })
            .collect();
        let pipelines: Vec<_> = PHASES
            .iter()
            .map(|&(ph, wide)| (g.pipelines.get(&g.device, Kernel::Sample, &self.sl.consts(ph)), wide))
            .collect();
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            for step in &steps {
                for (p, wide) in &pipelines {
                    let bufs = [
                        (0, &self.logits),
                        (1, &self.ids),
                        (2, &self.out),
                        (3, &self.state),
                        (4, &self.params),
                        (5, step),
                        (6, &self.counters),
                    ];
                    let entries: Vec<wgpu::BindGroupEntry> = bufs
                        .iter()
                        .map(|&(i, b)| wgpu::BindGroupEntry { binding: i, resource: b.as_entire_binding() })
                        .collect();
                    let bind = g.device.create_bind_group(&wgpu::BindGroupDescriptor {
                        label: None,
                        layout: &p.layout,
                        entries: &entries,
                    });
                    pass.set_pipeline(&p.pipeline);
                    pass.set_bind_group(0, &bind, &[]);
                    pass.dispatch_workgroups(if *wide { self.sl.nw as u32 } else { 1 }, 1, 1);
                }
            }
        }
        g.queue.submit([enc.finish()]);
        g.check().unwrap();
        read_u32(g, &self.out, self.slots)
    }
}

/// The CPU sampler's rules (sampler.rs), as the set of tokens it may draw and their
/// probabilities.
fn reference(logits: &[f32], history: &[u32], p: &SamplingParams) -> Vec<(u32, f64)> {
    let mut l = logits.to_vec();
    let mut seen = std::collections::HashSet::new();
    for &t in history {
        if p.repetition_penalty != 1.0 && seen.insert(t) {
            let x = &mut l[t as usize];
            *x = if *x > 0.0 { *x / p.repetition_penalty } else { *x * p.repetition_penalty };
        }
    }
    let k = if p.top_k == 0 { l.len() } else { p.top_k.min(l.len()) };
    let cand = ferrolm::sampler::top_k(&l, k);
    if p.is_greedy() {
        return vec![(cand[0].0, 1.0)];
    }
    let max = cand[0].1;
    let w: Vec<f64> = cand.iter().map(|&(_, x)| (((x - max) / p.temperature) as f64).exp()).collect();
    let z: f64 = w.iter().sum();
    let mut keep = w.len();
    if p.top_p < 1.0 {
        let mut acc = 0.0;
        for (i, q) in w.iter().enumerate() {
            acc += q / z;
            if acc >= p.top_p as f64 {
                keep = i + 1;
                break;
            }
        }
    }
    if p.min_p > 0.0 {
        keep = keep.min(w.iter().take_while(|&&q| q >= p.min_p as f64).count().max(1));
    }
    let kept: f64 = w[..keep].iter().sum();
    cand[..keep].iter().zip(&w).map(|(&(t, _), &q)| (t, q / kept)).collect()
}

/// Random logits like an LM head's: a few dozen strong candidates over a long tail.
fn logits(r: &mut R, v: usize) -> Vec<f32> {
    (0..v).map(|_| r.f() * 3.0 + if r.below(100) == 0 { 4.0 + r.f() * 2.0 } else { 0.0 }).collect()
}

fn cases() -> Vec<SamplingParams> {
    let s = |temperature, top_k, top_p, min_p, repetition_penalty| SamplingParams {
        temperature,
        top_k,
        top_p,
        min_p,
        repetition_penalty,
        seed: 11,
        ..Default::default()
    };
    vec![
        s(0.8, 0, 1.0, 0.0, 1.0),
        s(0.7, 0, 0.9, 0.0, 1.0),
        s(1.0, 40, 1.0, 0.0, 1.0),
        s(0.7, 40, 0.95, 0.0, 1.0),
        s(1.0, 0, 1.0, 0.05, 1.0),
        s(0.6, 20, 0.8, 0.02, 1.3),
        s(1.2, 300, 0.98, 0.0, 0.8),
        s(2.0, 3, 1.0, 0.0, 1.0),
    ]
}

/// Every draw is a token the CPU keeps, and over many draws each kept token comes up about as
/// often as the CPU's probability says (a chi-square bound far in the tail).
#[test]
fn draws_follow_the_cpu_rules() {
    let g = gpu();
    let mut r = R::new();
    for v in [1000usize, 9000] {
        let l = logits(&mut r, v);
        // Each draw joins the penalty set; with the 400 largest logits in it from the start, the
        // set the draws come from (the top few hundred at most) stays the same.
        let mut history: Vec<u32> = ferrolm::sampler::top_k(&l, 400).iter().map(|&(t, _)| t).collect();
        history.extend((0..30).map(|_| r.below(v as u32)));
        let rig = Rig::new(&g, &l, 256);
        for p in cases() {
            let want = reference(&l, &history, &p);
            let prob: std::collections::HashMap<u32, f64> = want.iter().cloned().collect();
            // The GPU sums the weights before the cut's bin in fixed point (2^-19 of the largest
            // weight a token): a cut within ~1e-4 of p may keep one token more or less. Draws must
            // come from the set a top-p 0.001 larger keeps.
            let loose = SamplingParams { top_p: (p.top_p + 1e-3).min(1.0), ..p.clone() };
            let allowed: std::collections::HashSet<u32> =
                reference(&l, &history, &loose).iter().map(|&(t, _)| t).collect();
            let mut counts: std::collections::HashMap<u32, usize> = Default::default();
            let n = 2048;
            for b in 0..n / rig.slots {
                // The draws add to the penalty set; start each batch from the same context.
                rig.set(&g, &p, &history);
                for t in rig.draw(&g, (b * rig.slots) as u32) {
                    assert!(
                        allowed.contains(&t),
                        "v {v} {p:?}: drew {t}, which the CPU does not keep ({} kept)",
                        want.len()
                    );
                    *counts.entry(t).or_default() += 1;
                }
            }
            // Chi-square over tokens expected at least 5 times, the rest pooled.
            let (mut chi2, mut df, mut pooled_e, mut pooled_o) = (0.0, 0usize, 0.0, 0.0);
            for (&t, &q) in &prob {
                let e = q * n as f64;
                let o = *counts.get(&t).unwrap_or(&0) as f64;
                if e >= 5.0 {
                    chi2 += (o - e).powi(2) / e;
                    df += 1;
                } else {
                    pooled_e += e;
                    pooled_o += o;
                }
            }
            if pooled_e >= 5.0 {
                chi2 += (pooled_o - pooled_e).powi(2) / pooled_e;
                df += 1;
            }
            let df = df.saturating_sub(1).max(1) as f64;
            let bound = df + 7.0 * (2.0 * df).sqrt() + 10.0;
            eprintln!("v {v} {p:?}: {} kept, chi2 {chi2:.1} on {df} degrees of freedom (bound {bound:.1})", want.len());
            assert!(chi2 < bound, "v {v} {p:?}: chi2 {chi2:.1} > {bound:.1}");
        }
    }
}

/// Cuts that keep only the largest score draw the argmax (after the penalty), whatever the seed;
/// so does greedy decoding with a penalty. Each draw joins the penalty set.
#[test]
fn single_token_cuts_draw_the_argmax() {
    let g = gpu();
    let mut r = R::new();
    let v = 70000;
    let l = logits(&mut r, v);
    let history: Vec<u32> = (0..50).map(|_| r.below(v as u32)).collect();
    let rig = Rig::new(&g, &l, 8);
    let base = SamplingParams { temperature: 1.3, seed: 5, ..Default::default() };
    for p in [
        SamplingParams { top_k: 1, ..base.clone() },
        SamplingParams { top_p: 1e-6, ..base.clone() },
        SamplingParams { min_p: 1.0, ..base.clone() },
        SamplingParams { temperature: 0.0, repetition_penalty: 1.5, ..base.clone() },
        SamplingParams { top_k: 1, repetition_penalty: 1.5, ..base.clone() },
    ] {
        let want = reference(&l, &history, &p);
        assert_eq!(want.len(), 1, "{p:?}");
        rig.set(&g, &p, &history);
        let got = rig.draw(&g, 100);
        if p.repetition_penalty == 1.0 {
            assert!(got.iter().all(|&t| t == want[0].0), "{p:?}: {got:?}, argmax {}", want[0].0);
        } else {
            // Draw i sees the draws before it penalized: replay that on the CPU.
            let mut h = history.clone();
            for &t in &got {
                assert_eq!(t, reference(&l, &h, &p)[0].0, "{p:?}: {got:?}");
                h.push(t);
            }
        }
    }
}

/// The engine samples on the GPU: the same seed gives the same tokens, another seed other
/// tokens, and greedy decoding with a repetition penalty matches the CPU sampler exactly.
#[test]
fn engine_sampling_on_the_gpu() {
    let Some(path) = model_path() else { return };
    use ferrolm::engine::{Engine, GenerateOptions};
    use ferrolm::gpu::block_on;
    let src = ferrolm::weights::FileSource::open(path).unwrap();
    let mut e = block_on(Engine::load(&src, &Default::default(), &mut |_, _, _| {})).unwrap();
    let prompt = e.prompt_ids("The history of the printing press begins").unwrap();
    let mut run = |sampling: SamplingParams, cpu_sampling: bool| {
        let opts = GenerateOptions { max_tokens: 12, sampling, cpu_sampling, ..Default::default() };
        block_on(e.generate(&prompt, &opts, &mut |_, _| true)).unwrap().tokens
    };
    let p = SamplingParams { temperature: 0.9, top_p: 0.95, top_k: 50, seed: 3, ..Default::default() };
    let a = run(p.clone(), false);
    assert_eq!(a, run(p.clone(), false), "same seed, other tokens");
    let other: Vec<Vec<u32>> = (4..8).map(|seed| run(SamplingParams { seed, ..p.clone() }, false)).collect();
    assert!(other.iter().any(|t| *t != a), "four other seeds all gave {a:?}");
    let greedy_pen = SamplingParams { repetition_penalty: 1.4, ..Default::default() };
    assert_eq!(run(greedy_pen.clone(), false), run(greedy_pen, true), "GPU and CPU greedy with a penalty");
}
