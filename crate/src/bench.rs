//! `ferrolm bench` and `engine.benchmark()`: prefill and decode speed of a loaded model,
//! measured the way the engine runs (one submit per step, the token chosen on the GPU by argmax
//! or sampling, pipelined token readback), medians over repetitions. In the browser the same
//! loop runs inside the wasm module, so beside `generate()`'s own speed it separates the cost of
//! the JavaScript API (worker messages, the async iterator, text) from the engine's.

use crate::engine::{now_ms, Engine};
use crate::error::{Error, Result};
use crate::model::forward::Pick;
use crate::sampler::{Rng, SamplingParams};

#[derive(Clone, Debug)]
pub struct BenchOptions {
    pub prompt_len: usize,
    pub gen: usize,
    /// Context already in the KV cache when decoding starts (default: `prompt_len`).
    pub depth: Option<usize>,
    pub reps: usize,
    /// Decode by sampling on the GPU with these parameters (`None`: greedy).
    pub sampling: Option<SamplingParams>,
    /// Decode steps kept on the GPU before the oldest one's token is read back (default
    /// `engine::PIPELINE_DEPTH`, as a generation keeps them).
    pub inflight: Option<usize>,
}

impl BenchOptions {
    /// Options as JavaScript passes them (`engine.benchmark({promptLen, gen, depth, reps, inflight,
    /// temperature, topK, topP, minP, repetitionPenalty, frequencyPenalty, presencePenalty,
    /// logitBias, seed})`): the sampling fields are `SamplingParams`' own (seed 1 unless given,
    /// as `ferrolm bench`); any of them but the seed makes the decode sampled (on the GPU, as a
    /// generation samples). Unknown fields are refused.
    pub fn from_json(json: &str) -> Result<BenchOptions> {
        #[derive(serde::Deserialize, Default)]
        #[serde(default, rename_all = "camelCase", deny_unknown_fields)]
        struct Js {
            prompt_len: Option<usize>,
            gen: Option<usize>,
            depth: Option<usize>,
            reps: Option<usize>,
            inflight: Option<usize>,
            #[serde(flatten)]
            sampling: SamplingParams,
        }
        const WHAT: &str = "benchmark options";
        let j: Js = crate::generation::from_js(json, WHAT)?;
        let keys = crate::generation::js_keys(json);
        let own = ["promptLen", "gen", "depth", "reps", "inflight", "seed"];
        let any = keys.iter().any(|k| !own.contains(&k.as_str()));
        let mut sampling = j.sampling;
        if !keys.iter().any(|k| k == "seed") {
            sampling.seed = 1;
        }
        Ok(BenchOptions {
            prompt_len: j.prompt_len.unwrap_or(512),
            gen: j.gen.unwrap_or(128),
            depth: j.depth,
            reps: j.reps.unwrap_or(3),
            sampling: any.then_some(sampling),
            inflight: j.inflight,
        })
    }
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchReport {
    pub prompt_len: usize,
    pub gen: usize,
    pub depth: usize,
    pub reps: usize,
    pub sampling: Option<SamplingParams>,
    pub inflight: usize,
    pub prefill_tok_s: f64,
    /// Median time from the prompt's submission to its last position's logits on the CPU: the
    /// time to first token of a `prompt_len`-token prompt (all its chunks).
    pub ttft_ms: f64,
    pub decode_tok_s: f64,
    pub ms_per_token: f64,
    pub prefill_ms: Vec<f64>,
    pub decode_ms: Vec<f64>,
    pub dispatches_per_token: usize,
    pub prefill_dispatches_per_chunk: usize,
    pub submits_per_token: usize,
    pub readbacks_per_token: usize,
    pub weight_bytes_per_token: u64,
    pub kv_bytes_per_token: u64,
    pub effective_gb_s: f64,
    pub gpu_memory_bytes: u64,
    /// Median GPU time of one decode step at the benchmark depth (timestamp queries), if
    /// available; the step chooses its token as the measured decode does (argmax or sampling).
    pub gpu_ms_per_step: Option<f64>,
    /// Median CPU time the engine spends recording and submitting one decode step (the write of
    /// the step's position, the encoder, the pass's dispatches, the submit): beside
    /// `ms_per_token` and `gpu_ms_per_step` it tells whether a decode is bound by this thread.
    pub cpu_ms_per_step: f64,
    pub adapter: serde_json::Value,
    pub model: serde_json::Value,
    /// Per-kernel GPU time (kernel, dispatches, ms) of one decode step and one prefill step
    /// at the benchmark sizes, where the adapter has timestamps (`Runtime::profile_step`).
    pub decode_profile: Option<Vec<(String, usize, f64)>>,
    pub prefill_profile: Option<Vec<(String, usize, f64)>>,
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    s[s.len() / 2]
}

/// Context needed for these options; load the engine with at least this.
pub fn context_needed(o: &BenchOptions) -> usize {
    o.depth.unwrap_or(o.prompt_len).max(o.prompt_len).saturating_add(o.gen).saturating_add(1)
}

/// Warm-up prefills before the measured repetitions: at most this many, for at least this long.
const WARMUP_MAX: usize = 32;
const WARMUP_MS: f64 = 1500.0;

impl BenchOptions {
    /// The options' own limits, before any model is loaded.
    pub fn validate(&self) -> Result<()> {
        let inflight = self.inflight.unwrap_or(crate::engine::PIPELINE_DEPTH);
        if self.prompt_len == 0 || self.gen == 0 || self.reps == 0 || inflight == 0 || self.depth == Some(0) {
            return Err(Error::InvalidOption(
                "bench needs --prompt-len, --gen, --reps, --inflight and --depth of at least 1".into(),
            ));
        }
        let slots = crate::model::forward::TOKEN_SLOTS;
        if inflight > slots {
            return Err(Error::InvalidOption(format!("bench --inflight {inflight}: at most {slots} steps")));
        }
        let (need, max) = (context_needed(self), crate::model::forward::MAX_CONTEXT);
        if need > max {
            return Err(Error::InvalidOption(format!(
                "bench: --depth / --prompt-len plus --gen need a {need}-token context; at most {max}"
            )));
        }
        Ok(())
    }
}

pub async fn run(engine: &mut Engine, o: &BenchOptions) -> Result<BenchReport> {
    o.validate()?;
    let inflight = o.inflight.unwrap_or(crate::engine::PIPELINE_DEPTH);
    let depth = o.depth.unwrap_or(o.prompt_len);
    if let Some(p) = &o.sampling {
        crate::sampler::Sampler::new(p.clone())?;
    }
    // The runs below fill the cache with random tokens.
    engine.invalidate();
    let rt = &mut engine.rt;
    if context_needed(o) > rt.context {
        return Err(Error::ContextOverflow { tokens: depth, max_new: o.gen, context: rt.context });
    }
    let mut rng = Rng::new(42);
    let vocab = rt.cfg.vocab as u64;
    let prompt: Vec<u32> = (0..o.prompt_len).map(|_| (rng.next_u64() % vocab) as u32).collect();
    let fill: Vec<u32> = (0..depth).map(|_| (rng.next_u64() % vocab) as u32).collect();

    // Decoding `gen` tokens from `start` with the GPU choosing each one, `inflight` steps in
    // flight as a generation keeps them.
    async fn decode(
        rt: &mut crate::runtime::Runtime,
        (start, first, gen): (usize, u32, usize),
        sampling: &Option<SamplingParams>,
        inflight: usize,
    ) -> Result<(f64, f64)> {
        rt.pos = start;
        let t0 = now_ms();
        let mut encode = 0.0;
        if let Some(p) = sampling {
            rt.set_sampling(p, &[first], &[first])?;
        }
        let pick = Pick { sampled: sampling.is_some(), masked: false, hidden: false };
        let mut queue = crate::runtime::StepQueue::default();
        let mut feed = Some(first);
        for _ in 0..gen {
            let t = now_ms();
            queue.push(rt, feed.take(), pick)?;
            encode += now_ms() - t;
            if queue.len() >= inflight {
                queue.pop(rt).await?;
            }
        }
        while queue.pop(rt).await?.is_some() {}
        Ok((now_ms() - t0, encode / gen as f64))
    }

    // Warm-up: compile caches, first-touch allocations, clocks. An idle H100 took a second or
    // more of work to reach its clocks (prefills of 90, 63, then 30 ms; once two in a row at 73
    // before 25), so prefill repeats for at least WARMUP_MS and until two in a row agree within
    // 10% (at most WARMUP_MAX times).
    let (start, mut last) = (now_ms(), f64::INFINITY);
    for _ in 0..WARMUP_MAX {
        rt.pos = 0;
        let t0 = now_ms();
        rt.forward(&prompt).await?;
        let ms = now_ms() - t0;
        if now_ms() - start >= WARMUP_MS && (ms - last).abs() <= 0.1 * last {
            break;
        }
        last = ms;
    }
    decode(rt, (o.prompt_len, 1, 8.min(o.gen)), &o.sampling, inflight).await?;

    // The timed step and the profile choose their token as the measured decode does.
    let pick = Pick { sampled: o.sampling.is_some(), masked: false, hidden: false };
    let (mut pre, mut dec, mut gpu, mut cpu) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..o.reps {
        rt.pos = 0;
        let t0 = now_ms();
        rt.forward(&prompt).await?;
        pre.push(now_ms() - t0);
        if depth != o.prompt_len {
            rt.pos = 0;
            rt.forward(&fill).await?;
        }
        let (ms, encode) = decode(rt, (depth, 1, o.gen), &o.sampling, inflight).await?;
        dec.push(ms);
        cpu.push(encode);
        rt.pos = depth;
        if let Some(ms) = rt.time_decode_step(pick).await? {
            gpu.push(ms);
        }
    }
    rt.pos = depth;
    let decode_profile = rt.profile_step(1, pick).await?;
    rt.pos = 0;
    let prefill_profile = rt.profile_step(o.prompt_len.min(rt.max_batch), Pick::GREEDY).await?;
    rt.gpu.check()?;
    let (p, d) = (median(&pre), median(&dec));
    let decode_tok_s = o.gen as f64 / (d / 1e3);
    let cfg = &rt.cfg;
    let kv_bytes_per_token = (cfg.n_layers * 2 * cfg.n_kv_heads * cfg.head_dim * 2 * (depth + o.gen / 2)) as u64;
    let wb = rt.weight_bytes_per_token();
    Ok(BenchReport {
        prompt_len: o.prompt_len,
        gen: o.gen,
        depth,
        reps: o.reps,
        sampling: o.sampling.clone(),
        inflight,
        prefill_tok_s: o.prompt_len as f64 / (p / 1e3),
        ttft_ms: p,
        decode_tok_s,
        ms_per_token: d / o.gen as f64,
        prefill_ms: pre,
        decode_ms: dec,
        // The median step's (a cache past the model's short-merge depth takes one more a layer).
        dispatches_per_token: rt
            .dispatches_at(depth + o.gen / 2, Pick { sampled: o.sampling.is_some(), masked: false, hidden: false }),
        prefill_dispatches_per_chunk: rt.prefill_dispatches(),
        submits_per_token: 1,
        readbacks_per_token: 1,
        weight_bytes_per_token: wb,
        kv_bytes_per_token,
        effective_gb_s: (wb + kv_bytes_per_token) as f64 * decode_tok_s / 1e9,
        gpu_memory_bytes: rt.gpu_bytes(),
        gpu_ms_per_step: if gpu.is_empty() { None } else { Some(median(&gpu)) },
        cpu_ms_per_step: median(&cpu),
        adapter: serde_json::json!(rt.gpu.summary),
        decode_profile,
        prefill_profile,
        model: serde_json::json!({"source": engine.source_name, "arch": cfg.arch, "layers": cfg.n_layers, "hidden": cfg.hidden, "vocab": cfg.vocab, "context": rt.context}),
    })
}
