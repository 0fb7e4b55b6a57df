//! Choosing the next token from logits: greedy, or temperature with top-k, top-p and min-p
//! filtering, with an optional repetition penalty. Seeded, so the same seed gives the same text
//! on every platform (the generator is ours, not the OS's).

use crate::error::{Error, Result};

/// Deserialized as the package spells it (camelCase: `topK`, `logitBias: {"id": bias}`), flattened
/// into `GenerateOptions` and the benchmark's options; serialized (bench reports) in snake_case.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, rename_all(deserialize = "camelCase"))]
pub struct SamplingParams {
    /// 0 means greedy (argmax).
    pub temperature: f32,
    /// 0 means no top-k filter.
    pub top_k: usize,
    /// 1 means no nucleus filter.
    pub top_p: f32,
    /// 0 means no min-p filter.
    pub min_p: f32,
    /// 1 means no penalty; >1 discourages tokens already in the context (CTRL/llama.cpp style).
    pub repetition_penalty: f32,
    /// OpenAI's: subtracted from a token's logit once per time it was generated so far.
    pub frequency_penalty: f32,
    /// OpenAI's: subtracted from the logit of every token generated so far.
    pub presence_penalty: f32,
    /// Added to the logits of these token ids (OpenAI's `logit_bias`, -100..=100).
    #[serde(deserialize_with = "bias_map")]
    pub logit_bias: Vec<(u32, f32)>,
    pub seed: u64,
}

/// A `logit_bias` key as a token id: decimal digits only, without leading zeros (u32's parser
/// also takes "+5", and "05" beside "5" would name one token twice).
pub fn bias_key(k: &str) -> Option<u32> {
    let canonical = !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()) && (k == "0" || !k.starts_with('0'));
    k.parse().ok().filter(|_| canonical)
}

/// `{tokenId: bias}` (OpenAI's `logit_bias`) as (id, bias) pairs in key order.
fn bias_map<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Vec<(u32, f32)>, D::Error> {
    let map: std::collections::BTreeMap<String, f32> = serde::Deserialize::deserialize(d)?;
    map.into_iter()
        .map(|(k, v)| match bias_key(&k) {
            Some(id) => Ok((id, v)),
            None => Err(serde::de::Error::custom(format!("logitBias key {k:?} is not a token id"))),
        })
        .collect()
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            logit_bias: Vec::new(),
            seed: 0,
        }
    }
}

/// Temperatures below this decode greedily (see `SamplingParams::is_greedy`).
pub const GREEDY_BELOW: f32 = 1e-20;
/// The smallest repetition penalty: logits divided by less could pass f32's range.
pub const MIN_REPETITION_PENALTY: f32 = 1e-6;

impl SamplingParams {
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidOption(m));
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return bad(format!("temperature must be a finite number >= 0, got {}", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad(format!("top-p must be in (0, 1], got {}", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad(format!("min-p must be in [0, 1], got {}", self.min_p));
        }
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty >= MIN_REPETITION_PENALTY) {
            return bad(format!(
                "repetition penalty must be a finite number >= {MIN_REPETITION_PENALTY:e} (smaller ones overflow the \
                 logits they divide), got {:?}",
                self.repetition_penalty
            ));
        }
        for (name, v) in [("frequency penalty", self.frequency_penalty), ("presence penalty", self.presence_penalty)] {
            if !(-2.0..=2.0).contains(&v) {
                return bad(format!("{name} must be in [-2, 2], got {v}"));
            }
        }
        if let Some((id, b)) = self.logit_bias.iter().find(|(_, b)| !(-100.0..=100.0).contains(b)) {
            return bad(format!("logit bias of token {id} must be in [-100, 100], got {b}"));
        }
        Ok(())
    }

    /// OpenAI's adjustments, in place: logit bias, then frequency and presence penalties over
    /// the `generated` tokens.
    pub fn adjust(&self, logits: &mut [f32], generated: &[u32]) {
        for &(id, b) in &self.logit_bias {
            if let Some(x) = logits.get_mut(id as usize) {
                *x += b;
            }
        }
        if self.frequency_penalty == 0.0 && self.presence_penalty == 0.0 {
            return;
        }
        let mut counts = std::collections::HashMap::<u32, u32>::new();
        for &t in generated {
            *counts.entry(t).or_default() += 1;
        }
        for (t, n) in counts {
            if let Some(x) = logits.get_mut(t as usize) {
                *x -= self.frequency_penalty * n as f32 + self.presence_penalty;
            }
        }
    }

    /// Temperatures below `GREEDY_BELOW` too: their limit, where 1 / T would overflow the
    /// samplers' f32 scaling into NaN (1e-40 drew token ids past the vocabulary).
    pub fn is_greedy(&self) -> bool {
        self.temperature < GREEDY_BELOW
    }

    /// Greedy with nothing that changes the logits: the argmax of the raw logits.
    pub fn is_plain_greedy(&self) -> bool {
        self.is_greedy()
            && self.repetition_penalty == 1.0
            && self.frequency_penalty == 0.0
            && self.presence_penalty == 0.0
            && self.logit_bias.is_empty()
    }
}

/// A model's own sampling defaults (generation_config.json, or GGUF `general.sampling.*`), used by
/// the chat API where the request does not say; what a model lacks falls back to OpenAI's
/// (temperature 1, top-p 1). `do_sample` is not read: like vLLM, a chat samples by default.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct SamplingDefaults {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<usize>,
    pub min_p: Option<f32>,
    pub repetition_penalty: Option<f32>,
}

impl SamplingDefaults {
    /// From generation_config.json's text (fields that are missing or not numbers are skipped,
    /// values a request could not give are dropped with a warning).
    pub fn from_generation_config(text: &str) -> SamplingDefaults {
        let v: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
        let f = |k: &str| v.get(k).and_then(|x| x.as_f64()).map(|x| x as f32).filter(|x| x.is_finite());
        SamplingDefaults {
            temperature: f("temperature"),
            top_p: f("top_p"),
            top_k: v.get("top_k").and_then(|x| x.as_u64()).map(|x| x as usize),
            min_p: f("min_p"),
            repetition_penalty: f("repetition_penalty"),
        }
        .checked("generation_config.json", ["temperature", "top_p", "min_p", "repetition_penalty"])
    }

    /// From a GGUF's `general.sampling.*` keys (llama.cpp's names).
    pub fn from_gguf(g: &crate::weights::gguf::GgufFile) -> SamplingDefaults {
        let f = |k: &str| g.get_f64(k).ok().flatten().map(|x| x as f32).filter(|x| x.is_finite());
        SamplingDefaults {
            temperature: f("general.sampling.temp"),
            top_p: f("general.sampling.top_p"),
            top_k: g.get_u64("general.sampling.top_k").ok().flatten().map(|x| x as usize),
            min_p: f("general.sampling.min_p"),
            repetition_penalty: f("general.sampling.penalty_repeat"),
        }
        .checked(
            &g.name,
            [
                "general.sampling.temp",
                "general.sampling.top_p",
                "general.sampling.min_p",
                "general.sampling.penalty_repeat",
            ],
        )
    }

    /// Without the values out of their range (a temperature of -1 would fail every request
    /// that relies on the model's defaults, blamed on the request); `keys` name them in `file`.
    fn checked(mut self, file: &str, keys: [&str; 4]) -> SamplingDefaults {
        let fields = [
            (&mut self.temperature, keys[0], (|v: f32| v >= 0.0) as fn(f32) -> bool),
            (&mut self.top_p, keys[1], |v| v > 0.0 && v <= 1.0),
            (&mut self.min_p, keys[2], |v| (0.0..=1.0).contains(&v)),
            (&mut self.repetition_penalty, keys[3], |v| v >= MIN_REPETITION_PENALTY),
        ];
        for (field, key, ok) in fields {
            if let Some(v) = field.filter(|v| !ok(*v)) {
                log::warn!("{file}: {key} = {v} is out of range; the request's or OpenAI's default applies");
                *field = None;
            }
        }
        self
    }

    /// Parameters for a chat request: the model's defaults, else OpenAI's.
    pub fn params(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature.unwrap_or(1.0),
            top_p: self.top_p.unwrap_or(1.0),
            top_k: self.top_k.unwrap_or(0),
            min_p: self.min_p.unwrap_or(0.0),
            repetition_penalty: self.repetition_penalty.unwrap_or(1.0),
            ..SamplingParams::default()
        }
    }
}

/// xoshiro256** seeded through splitmix64.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut z = seed;
        let mut next = || {
            z = z.wrapping_add(0x9E3779B97F4A7C15);
            let mut x = z;
            x = (x ^ (x >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94D049BB133111EB);
            x ^ (x >> 31)
        };
        Rng { s: [next(), next(), next(), next()] }
    }

    pub fn next_u64(&mut self) -> u64 {
        let r = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        r
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

pub struct Sampler {
    pub params: SamplingParams,
    rng: Rng,
}

/// Index of the largest value; the lowest index wins ties (as torch.argmax does).
pub fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best
}

/// The `k` largest (id, value) pairs, largest first.
pub fn top_k(v: &[f32], k: usize) -> Vec<(u32, f32)> {
    let mut idx: Vec<u32> = (0..v.len() as u32).collect();
    let k = k.min(v.len());
    if k == 0 {
        return Vec::new();
    }
    idx.select_nth_unstable_by(k - 1, |&a, &b| v[b as usize].total_cmp(&v[a as usize]).then(a.cmp(&b)));
    idx.truncate(k);
    idx.sort_by(|&a, &b| v[b as usize].total_cmp(&v[a as usize]).then(a.cmp(&b)));
    idx.into_iter().map(|i| (i, v[i as usize])).collect()
}

/// Log-probability of `id` under softmax(`logits`), with the `k` most likely alternatives.
pub fn logprob(logits: &[f32], id: u32, k: usize) -> crate::generation::TokenLogprob {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&x| ((x - max) as f64).exp()).sum();
    let lse = max as f64 + sum.ln();
    let lp = |x: f32| (x as f64 - lse) as f32;
    crate::generation::TokenLogprob {
        token: id,
        logprob: lp(logits[id as usize]),
        top: top_k(logits, k).into_iter().map(|(i, x)| (i, lp(x))).collect(),
    }
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Result<Sampler> {
        params.validate()?;
        let rng = Rng::new(params.seed);
        Ok(Sampler { params, rng })
    }

    /// Pick the next token. `history` is the context so far (prompt and generated tokens).
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        let p = &self.params;
        let mut l = logits.to_vec();
        if p.repetition_penalty != 1.0 {
            let mut seen = std::collections::HashSet::new();
            for &t in history {
                if let Some(x) = l.get_mut(t as usize) {
                    if seen.insert(t) {
                        *x = if *x > 0.0 { *x / p.repetition_penalty } else { *x * p.repetition_penalty };
                    }
                }
            }
        }
        if p.is_greedy() {
            return argmax(&l) as u32;
        }
        // Masked tokens (-inf, from a constraint) have probability 0: leaving them out of the
        // sort changes nothing but the cost.
        let live = l.iter().filter(|x| **x > f32::NEG_INFINITY).count().max(1);
        let k = if p.top_k == 0 { live } else { p.top_k.min(live) };
        let u = self.rng.next_f64();
        // Sorting a whole vocabulary is most of a token's time (~14 ms for 128k tokens): sort
        // only the largest HEAD when the cuts and the draw land among them.
        if k == live && k > HEAD {
            if let Some(t) = draw_from_head(&l, HEAD, p, u) {
                return t;
            }
        }
        draw(top_k(&l, k), p, u)
    }
}

/// Candidates sorted (`top_k`) when a vocabulary's candidates are all live: beyond this many,
/// `Sampler::sample` sorts only this many first.
const HEAD: usize = 1024;

/// The token `u` draws among sorted candidates `cand` (largest first) after top-p and min-p,
/// with `rest` the logits of the candidates after them (unsorted: they only add to the
/// normalization). `None` when the cuts or the draw would need the order of `rest`.
fn draw_partial(cand: &[(u32, f32)], rest: &[f32], p: &SamplingParams, u: f64) -> Option<u32> {
    let max = cand[0].1;
    let weight = |x: f32| (((x - max) / p.temperature) as f64).exp();
    let mut probs: Vec<f64> = cand.iter().map(|&(_, x)| weight(x)).collect();
    let sum: f64 = probs.iter().sum::<f64>() + rest.iter().map(|&x| weight(x)).sum::<f64>();
    probs.iter_mut().for_each(|x| *x /= sum);
    let partial = !rest.is_empty();
    // `None`: every candidate, those in `rest` too.
    let mut keep = None;
    if p.top_p < 1.0 {
        let mut acc = 0.0;
        for (i, &q) in probs.iter().enumerate() {
            acc += q;
            if acc >= p.top_p as f64 {
                keep = Some(i + 1);
                break;
            }
        }
    }
    if p.min_p > 0.0 {
        let floor = probs[0] * p.min_p as f64;
        let above = probs.iter().take_while(|&&q| q >= floor).count().max(1);
        // Past the sorted candidates `rest` may hold more above the floor.
        if above < probs.len() || !partial {
            keep = Some(keep.map_or(above, |k| k.min(above)));
        }
    }
    let keep = match keep {
        Some(k) => k,
        // A cut that falls past the sorted candidates.
        None if partial && (p.top_p < 1.0 || p.min_p > 0.0) => return None,
        None if partial => {
            // No cut: the draw must land among the sorted candidates.
            let total: f64 = probs.iter().sum::<f64>() + rest.iter().map(|&x| weight(x) / sum).sum::<f64>();
            let mut r = u * total;
            for (i, &q) in probs.iter().enumerate() {
                if r < q {
                    return Some(cand[i].0);
                }
                r -= q;
            }
            return None;
        }
        None => probs.len(),
    };
    let total: f64 = probs[..keep].iter().sum();
    let mut r = u * total;
    for (i, &q) in probs[..keep].iter().enumerate() {
        if r < q {
            return Some(cand[i].0);
        }
        r -= q;
    }
    Some(cand[keep - 1].0)
}

/// `draw_partial` over the `head` largest logits, the others unsorted.
fn draw_from_head(l: &[f32], head: usize, p: &SamplingParams, u: f64) -> Option<u32> {
    let cand = top_k(l, head);
    let mut in_head = vec![false; l.len()];
    cand.iter().for_each(|&(t, _)| in_head[t as usize] = true);
    let rest: Vec<f32> =
        l.iter().zip(&in_head).filter(|&(&x, &h)| !h && x > f32::NEG_INFINITY).map(|(&x, _)| x).collect();
    draw_partial(&cand, &rest, p, u)
}

/// The token `u` draws among all of `cand` (sorted, largest first).
fn draw(cand: Vec<(u32, f32)>, p: &SamplingParams, u: f64) -> u32 {
    draw_partial(&cand, &[], p, u).expect("with every candidate sorted the draw lands among them")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_defaults_out_of_range_are_dropped() {
        let d = super::SamplingDefaults::from_generation_config(
            r#"{"temperature": -1, "top_p": 0.8, "repetition_penalty": 0}"#,
        );
        assert_eq!((d.temperature, d.top_p, d.repetition_penalty), (None, Some(0.8), None));
    }

    #[test]
    fn greedy_and_ties() {
        let mut s = Sampler::new(SamplingParams::default()).unwrap();
        assert_eq!(s.sample(&[0.0, 3.0, 3.0, 1.0], &[]), 1);
    }

    #[test]
    fn same_seed_same_choices() {
        let logits: Vec<f32> = (0..100).map(|i| ((i * 37) % 11) as f32 * 0.3).collect();
        let p = SamplingParams { temperature: 1.0, top_k: 40, top_p: 0.95, min_p: 0.01, seed: 7, ..Default::default() };
        let mut a = Sampler::new(p.clone()).unwrap();
        let mut b = Sampler::new(p).unwrap();
        let x: Vec<u32> = (0..50).map(|_| a.sample(&logits, &[])).collect();
        let y: Vec<u32> = (0..50).map(|_| b.sample(&logits, &[])).collect();
        assert_eq!(x, y);
        assert!(x.iter().any(|&t| t != x[0]), "sampling at temperature 1 should vary");
    }

    #[test]
    fn vanishing_temperature_is_greedy_and_tiny_penalties_are_refused() {
        for t in [0.0, 1e-40, 1e-30, 1e-21] {
            assert!(SamplingParams { temperature: t, ..Default::default() }.is_greedy(), "{t}");
        }
        assert!(!SamplingParams { temperature: 1e-6, ..Default::default() }.is_greedy());
        let logits = vec![0.5f32, 3.0, -1.0, 2.9];
        let p = SamplingParams { temperature: 1e-40, seed: 5, ..Default::default() };
        assert_eq!(Sampler::new(p).unwrap().sample(&logits, &[]), 1);
        for r in [1e-38f32, 1e-7] {
            let p = SamplingParams { temperature: 1.0, repetition_penalty: r, ..Default::default() };
            assert!(p.validate().unwrap_err().to_string().contains("repetition penalty"), "{r}");
        }
        SamplingParams { repetition_penalty: 1e-6, ..Default::default() }.validate().unwrap();
    }

    #[test]
    fn top_k_one_is_greedy() {
        let logits = [0.5f32, 2.0, 1.0];
        let p = SamplingParams { temperature: 1.5, top_k: 1, seed: 3, ..Default::default() };
        let mut s = Sampler::new(p).unwrap();
        for _ in 0..20 {
            assert_eq!(s.sample(&logits, &[]), 1);
        }
    }

    #[test]
    fn min_p_and_top_p_cut_the_tail() {
        let logits = [10.0f32, 9.9, 0.0, -5.0];
        for p in [
            SamplingParams { temperature: 1.0, min_p: 0.5, seed: 1, ..Default::default() },
            SamplingParams { temperature: 1.0, top_p: 0.9, seed: 1, ..Default::default() },
        ] {
            let mut s = Sampler::new(p).unwrap();
            for _ in 0..200 {
                assert!(s.sample(&logits, &[]) < 2);
            }
        }
    }

    #[test]
    fn repetition_penalty_moves_greedy_choice() {
        let logits = [2.0f32, 1.9];
        let p = SamplingParams { repetition_penalty: 1.5, ..Default::default() };
        let mut s = Sampler::new(p).unwrap();
        assert_eq!(s.sample(&logits, &[0]), 1);
    }

    #[test]
    fn bad_params_are_refused() {
        for p in [
            SamplingParams { temperature: -1.0, ..Default::default() },
            SamplingParams { temperature: f32::NAN, ..Default::default() },
            SamplingParams { top_p: 0.0, ..Default::default() },
            SamplingParams { min_p: 2.0, ..Default::default() },
            SamplingParams { repetition_penalty: 0.0, ..Default::default() },
            SamplingParams { frequency_penalty: 2.5, ..Default::default() },
            SamplingParams { logit_bias: vec![(3, -101.0)], ..Default::default() },
        ] {
            assert!(matches!(Sampler::new(p), Err(Error::InvalidOption(_))));
        }
    }

    #[test]
    fn openai_penalties_and_bias() {
        let p = SamplingParams {
            frequency_penalty: 0.5,
            presence_penalty: 0.25,
            logit_bias: vec![(2, 10.0)],
            ..Default::default()
        };
        let mut l = [1.0f32, 1.0, 1.0];
        p.adjust(&mut l, &[0, 0, 1]);
        assert_eq!(l, [1.0 - 1.0 - 0.25, 1.0 - 0.5 - 0.25, 11.0]);
    }

    /// Drawing from the sorted head of a large vocabulary picks what sorting it all picks, and
    /// gives up (`None`) where a cut or the draw would fall past the head.
    #[test]
    fn head_draws_match_full_sort() {
        let mut r = Rng::new(9);
        let (mut from_head, mut gave_up) = (0, 0);
        for case in 0..24 {
            let n = 3000 + case * 100;
            // A few strong logits over a long tail; every fourth vector flat.
            let spread = if case % 4 == 3 { 0.5 } else { 9.0 };
            let l: Vec<f32> =
                (0..n).map(|_| (r.next_f64() as f32) * spread + if r.next_f64() < 0.01 { 6.0 } else { 0.0 }).collect();
            for p in [
                SamplingParams { temperature: 0.7, top_p: 0.9, ..Default::default() },
                SamplingParams { temperature: 1.0, ..Default::default() },
                SamplingParams { temperature: 1.3, min_p: 0.05, ..Default::default() },
                SamplingParams { temperature: 0.9, top_p: 0.95, min_p: 0.01, ..Default::default() },
                SamplingParams { temperature: 2.0, top_p: 0.999, ..Default::default() },
            ] {
                for i in 0..50 {
                    let u = (i as f64 + r.next_f64()) / 50.0;
                    let full = draw(top_k(&l, n), &p, u);
                    match draw_from_head(&l, 256, &p, u) {
                        Some(t) => {
                            assert_eq!(t, full, "n {n} {p:?} u {u}");
                            from_head += 1;
                        }
                        None => gave_up += 1,
                    }
                }
            }
        }
        assert!(from_head > 3000 && gave_up > 100, "head {from_head}, gave up {gave_up}");
    }

    #[test]
    fn top_k_order() {
        assert_eq!(top_k(&[1.0, 5.0, 3.0, 5.0], 3), vec![(1, 5.0), (3, 5.0), (2, 3.0)]);
    }
}
