//! The GPU sampler (shaders/sample.wgsl, model/sampling.rs) against a CPU reference of the same
//! rules as `sampler::Sampler`: on random logits, the tokens it may draw are exactly the ones the
//! CPU keeps after the penalty, top-k, top-p and min-p; its draws follow the CPU's probabilities;
//! cuts that leave one token draw the argmax; the penalty set grows with each draw. Then through
//! the engine: the same seed gives the same tokens, and greedy decoding with a repetition penalty
//! matches the CPU sampler token for token.

mod common;
use common::*;
use ferrolm::gpu::{Gpu, Kernel};
use ferrolm::ops::sample::{params_bytes, SampleLayout, PARAMS_BYTES, PHASES};
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
            params: g.uniform("params", PARAMS_BYTES as u64),
            slots,
        }
    }

    /// `history` is the context (repetition penalty), `generated` its generated part
    /// (frequency and presence penalties).
    fn set(&self, g: &Gpu, p: &SamplingParams, history: &[u32], generated: &[u32]) {
        let (q, sl) = (&g.queue, &self.sl);
        q.write_buffer(&self.params, 0, &params_bytes(p));
        q.write_buffer(&self.state, sl.pen_offset_bytes(), bytemuck::cast_slice(&sl.pen_bits(history)));
        q.write_buffer(&self.state, sl.cnt_offset_bytes(), bytemuck::cast_slice(&sl.counts(generated)));
        q.write_buffer(&self.state, sl.bias_offset_bytes(), bytemuck::cast_slice(&sl.bias(&p.logit_bias)));
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

/// The CPU sampler's rules (sampler.rs: OpenAI's adjustments over the `generated` tokens, then
/// the repetition penalty over `history` and the cuts), as the set of tokens it may draw and
/// their probabilities.
fn reference(logits: &[f32], history: &[u32], generated: &[u32], p: &SamplingParams) -> Vec<(u32, f64)> {
    let mut l = logits.to_vec();
    p.adjust(&mut l, generated);
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
        // OpenAI's adjustments: the presence penalty over generated tokens that hold the same
        // top 400 (so the draws do not change it either), and a logit bias that bans the
        // largest logit and lifts two others.
        let top: Vec<u32> = ferrolm::sampler::top_k(&l, 60).iter().map(|&(t, _)| t).collect();
        let generated = history[..400].to_vec();
        let openai = |q: SamplingParams| SamplingParams {
            presence_penalty: 0.7,
            logit_bias: vec![(top[0], -100.0), (top[12], 1.5), (top[50], 4.0)],
            ..q
        };
        // Only cases whose top-k keeps every draw inside those 400 (a draw from outside would
        // change the presence penalty of the later draws of its batch).
        let mut all = cases();
        all.extend([3, 5].map(|i| openai(cases()[i].clone())));
        for p in all {
            let generated = if p.presence_penalty != 0.0 { &generated[..] } else { &[][..] };
            let want = reference(&l, &history, generated, &p);
            let prob: std::collections::HashMap<u32, f64> = want.iter().cloned().collect();
            // The GPU sums the weights before the cut's bin in fixed point (2^-19 of the largest
            // weight a token): a cut within ~1e-4 of p may keep one token more or less. Draws must
            // come from the set a top-p 0.001 larger keeps.
            let loose = SamplingParams { top_p: (p.top_p + 1e-3).min(1.0), ..p.clone() };
            let allowed: std::collections::HashSet<u32> =
                reference(&l, &history, generated, &loose).iter().map(|&(t, _)| t).collect();
            let mut counts: std::collections::HashMap<u32, usize> = Default::default();
            let n = 2048;
            for b in 0..n / rig.slots {
                // The draws add to the penalty set; start each batch from the same context.
                rig.set(&g, &p, &history, generated);
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

/// Cuts that keep only the largest score draw the argmax (after the penalties and bias),
/// whatever the seed; so does greedy decoding with penalties or a bias. Each draw joins the
/// penalty set and the generated tokens' counts, so the draws are replayed on the CPU.
#[test]
fn single_token_cuts_draw_the_argmax() {
    let g = gpu();
    let mut r = R::new();
    let v = 70000;
    let l = logits(&mut r, v);
    let history: Vec<u32> = (0..50).map(|_| r.below(v as u32)).collect();
    let generated = history[40..].to_vec();
    let top: Vec<u32> = ferrolm::sampler::top_k(&l, 8).iter().map(|&(t, _)| t).collect();
    let rig = Rig::new(&g, &l, 8);
    let base = SamplingParams { temperature: 1.3, seed: 5, ..Default::default() };
    let greedy = SamplingParams { temperature: 0.0, ..base.clone() };
    for p in [
        SamplingParams { top_k: 1, ..base.clone() },
        SamplingParams { top_p: 1e-6, ..base.clone() },
        SamplingParams { min_p: 1.0, ..base.clone() },
        SamplingParams { repetition_penalty: 1.5, ..greedy.clone() },
        SamplingParams { top_k: 1, repetition_penalty: 1.5, ..base.clone() },
        // The largest logits are close: a frequency penalty of 0.4 a draw moves the argmax.
        SamplingParams { frequency_penalty: 0.4, presence_penalty: 0.1, ..greedy.clone() },
        SamplingParams { frequency_penalty: -0.3, repetition_penalty: 1.2, ..greedy.clone() },
        SamplingParams { logit_bias: vec![(top[0], -100.0), (top[5], 0.5), (7, 30.0)], ..greedy.clone() },
        SamplingParams { top_k: 1, logit_bias: vec![(top[3], 2.0)], frequency_penalty: 2.0, ..base.clone() },
        // A vanishing temperature is greedy (1 / T overflowed into NaN: ids past the vocabulary),
        // also beside the smallest repetition penalty.
        SamplingParams { temperature: 1e-40, ..base.clone() },
        SamplingParams { temperature: 1e-30, repetition_penalty: 1e-6, ..base.clone() },
    ] {
        rig.set(&g, &p, &history, &generated);
        let got = rig.draw(&g, 100);
        // Draw i sees the draws before it penalized: replay that on the CPU.
        let (mut h, mut gen) = (history.clone(), generated.clone());
        for &t in &got {
            let want = reference(&l, &h, &gen, &p);
            assert_eq!(want.len(), 1, "{p:?}");
            assert_eq!(t, want[0].0, "{p:?}: {got:?}");
            h.push(t);
            gen.push(t);
        }
        if p.frequency_penalty > 0.0 {
            let distinct: std::collections::HashSet<u32> = got.iter().copied().collect();
            assert!(distinct.len() > 1, "{p:?}: the penalty never moved the argmax: {got:?}");
        }
    }
}

/// The engine on the default model's shape and vocabulary with 2 random layers
/// (`common::small_smollm2`): these tests are about the sampler's plumbing, not the weights.
fn engine() -> Option<ferrolm::engine::Engine> {
    let src = ferrolm::weights::FileSource::open(common::small_smollm2()?).unwrap();
    Some(ferrolm::gpu::block_on(ferrolm::engine::Engine::load(&src, &Default::default(), &mut |_, _, _| {})).unwrap())
}

/// The engine samples on the GPU: the same seed gives the same tokens, another seed other
/// tokens, and greedy decoding with a repetition penalty matches the CPU sampler exactly.
#[test]
fn engine_sampling_on_the_gpu() {
    let Some(mut e) = engine() else { return };
    use ferrolm::engine::GenerateOptions;
    use ferrolm::gpu::block_on;
    let prompt = e.prompt_ids("The history of the printing press begins").unwrap();
    let mut run = |sampling: SamplingParams, cpu_sampling: bool| {
        let opts = GenerateOptions { max_tokens: 8, sampling, cpu_sampling, ..Default::default() };
        let r = block_on(e.generate(&prompt, &opts, &mut |_, _| true)).unwrap();
        assert_eq!(r.stats.gpu_sampling, !cpu_sampling, "{opts:?}");
        r.tokens
    };
    let p = SamplingParams { temperature: 0.9, top_p: 0.95, top_k: 50, seed: 3, ..Default::default() };
    let a = run(p.clone(), false);
    assert_eq!(a, run(p.clone(), false), "same seed, other tokens");
    let other: Vec<Vec<u32>> = (4..8).map(|seed| run(SamplingParams { seed, ..p.clone() }, false)).collect();
    assert!(other.iter().any(|t| *t != a), "four other seeds all gave {a:?}");
    let greedy_pen = SamplingParams { repetition_penalty: 1.4, ..Default::default() };
    assert_eq!(run(greedy_pen.clone(), false), run(greedy_pen, true), "GPU and CPU greedy with a penalty");
    // OpenAI's penalties and logit bias on the GPU: greedy matches the CPU token for token, and
    // they change the tokens (the bias bans the plain greedy run's second token).
    let plain = run(SamplingParams::default(), false);
    let openai = SamplingParams {
        frequency_penalty: 1.5,
        presence_penalty: 0.5,
        logit_bias: vec![(plain[1], -100.0), (plain[4], 2.0)],
        ..Default::default()
    };
    let gpu = run(openai.clone(), false);
    assert_eq!(gpu, run(openai, true), "GPU and CPU greedy with OpenAI's penalties and a bias");
    assert_ne!(gpu, plain, "the penalties and the bias changed nothing");
    assert!(!gpu.contains(&plain[1]), "token {} is banned by its bias: {gpu:?}", plain[1]);
}

/// A generation that stops (a stop id) or is cancelled with decode steps still queued leaves
/// their readbacks requested; the next generations must reuse those slots cleanly and give the
/// same tokens as before.
#[test]
fn generations_after_a_stop_with_steps_in_flight() {
    let Some(mut e) = engine() else { return };
    use ferrolm::engine::GenerateOptions;
    use ferrolm::gpu::block_on;
    let prompt = e.prompt_ids("Rivers carry water to the sea because").unwrap();
    let opts = GenerateOptions { max_tokens: 16, stop_ids: Some(vec![]), prefix_cache: false, ..Default::default() };
    let full = block_on(e.generate(&prompt, &opts, &mut |_, _| true)).unwrap().tokens;
    assert_eq!(full.len(), 16);
    // Twice: the second round meets the slots the first one's early ends left behind.
    for round in 0..2 {
        // Stopped by the third token, with the steps after it queued.
        let stop = GenerateOptions { stop_ids: Some(vec![full[2]]), ..opts.clone() };
        let got = block_on(e.generate(&prompt, &stop, &mut |_, _| true)).unwrap().tokens;
        assert_eq!(got, full[..got.len()], "round {round}: stopped generation");
        assert!(got.len() <= 3, "round {round}: did not stop at {}: {got:?}", full[2]);
        // Cancelled by the caller after two tokens.
        let mut n = 0;
        block_on(e.generate(&prompt, &opts, &mut |_, _| {
            n += 1;
            n < 2
        }))
        .unwrap();
        let again = block_on(e.generate(&prompt, &opts, &mut |_, _| true)).unwrap().tokens;
        assert_eq!(again, full, "round {round}: a full generation after the early ends");
        let reused = GenerateOptions { prefix_cache: true, ..opts.clone() };
        let again = block_on(e.generate(&prompt, &reused, &mut |_, _| true)).unwrap().tokens;
        assert_eq!(again, full, "round {round}: the same with the prompt's cache reused");
    }
}
