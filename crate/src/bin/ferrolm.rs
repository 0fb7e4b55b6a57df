//! The ferrolm command line: generate, chat, tokenize, inspect.
//! Errors go to stderr with a non-zero exit status; `--json` output is one object on the last line.

use clap::{Args, Parser, Subcommand};
use ferrolm::chat_template::ChatMessage;
use ferrolm::engine::{Engine, GenerateOptions, LoadOptions};
use ferrolm::gpu::block_on;
use ferrolm::sampler::SamplingParams;
use ferrolm::weights::gguf::{GgufFile, Value};
use ferrolm::weights::FileSource;
use ferrolm::{Error, Result};
use std::io::{BufRead, Write};

/// Diagnostics (progress, notes, the final error) go to stderr as well as it takes them: std's
/// `eprintln!` panics where stderr cannot be written (`2>/dev/full`: every command exited 101
/// with nothing done), and the exit status still says whether the command failed.
macro_rules! eprintln {
    ($($t:tt)*) => {{
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

macro_rules! eprint {
    ($($t:tt)*) => {{
        let _ = write!(std::io::stderr(), $($t)*);
    }};
}

/// The most an input file or standard input may hold (requests, schemas, grammars, references,
/// texts, a chat line): past it reading stops with an error instead of filling memory
/// (`--grammar /dev/zero` grew to 24 GB before the kernel killed it).
const MAX_INPUT_BYTES: u64 = 64 << 20;

/// All of `r` (`name` in errors) as UTF-8 text of at most `MAX_INPUT_BYTES`.
fn read_input(name: &str, r: impl std::io::Read) -> Result<String> {
    use std::io::Read;
    let mut buf = Vec::new();
    r.take(MAX_INPUT_BYTES + 1).read_to_end(&mut buf).map_err(|e| Error::io(name, e))?;
    if buf.len() as u64 > MAX_INPUT_BYTES {
        return Err(too_long(name, "more than"));
    }
    String::from_utf8(buf).map_err(|_| {
        Error::io(name, std::io::Error::new(std::io::ErrorKind::InvalidData, "stream did not contain valid UTF-8"))
    })
}

/// The error of an input past `MAX_INPUT_BYTES`: an IoError, like every other failed read.
fn too_long(name: &str, what: &str) -> Error {
    let e = std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{what} {} MiB", MAX_INPUT_BYTES >> 20));
    Error::io(name, e)
}

fn read_file(f: &str) -> Result<String> {
    read_input(f, std::fs::File::open(f).map_err(|e| Error::io(f, e))?)
}

/// `println!` for results: a failed write to stdout (a full disk, a closed file) ends the command
/// with an error and a non-zero status instead of a panic or a silent loss.
macro_rules! outln {
    ($($t:tt)*) => {
        writeln!(std::io::stdout(), $($t)*).map_err(|e| Error::write("stdout", e))?
    };
}

/// Streams generated text to stdout, keeping the first write error (ending the generation) for
/// the command to report.
struct Stream {
    out: std::io::Stdout,
    err: Option<std::io::Error>,
}

impl Stream {
    fn new() -> Self {
        Stream { out: std::io::stdout(), err: None }
    }

    /// Writes a piece; false (stop generating) once a write has failed.
    fn piece(&mut self, piece: &str) -> bool {
        if self.err.is_none() {
            if let Err(e) = self.out.write_all(piece.as_bytes()).and_then(|_| self.out.flush()) {
                self.err = Some(e);
            }
        }
        self.err.is_none()
    }

    fn finish(self) -> Result<()> {
        self.err.map_or(Ok(()), |e| Err(Error::write("stdout", e)))
    }
}

#[derive(Parser)]
#[command(name = "ferrolm", version, about = "LLM inference on WebGPU/Vulkan with hand-written WGSL kernels")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Generate text from a prompt, a chat message or token ids.
    Generate(GenerateArgs),
    /// Interactive chat (reads lines from stdin).
    Chat(ChatArgs),
    /// Answer OpenAI chat-completion requests (JSON files, `-` for stdin) in order on one
    /// engine, printing each response (or, with "stream": true, each chunk) as a JSON line.
    ChatCompletion {
        #[command(flatten)]
        model: ModelArgs,
        /// A request file (the body of POST /v1/chat/completions); repeatable.
        #[arg(long, required = true)]
        request: Vec<String>,
    },
    /// Embed texts with the model's sentence-transformers pipeline (modules.json), a GGUF's
    /// pooling type, or last-token (causal) / mean (bidirectional) pooling, normalized. Prints one
    /// embedding per line, or with --json the OpenAI `embeddings.create` response.
    Embed {
        #[command(flatten)]
        model: ModelArgs,
        /// A text to embed; repeatable. `-` reads one text per line from stdin.
        #[arg(long, required_unless_present = "ids", conflicts_with = "ids")]
        text: Vec<String>,
        /// Token ids to embed, comma-separated; repeatable (one input each). For models
        /// without a tokenizer.
        #[arg(long)]
        ids: Vec<String>,
        /// One of the model's named prompts (config_sentence_transformers.json), e.g. query.
        #[arg(long)]
        prompt_name: Option<String>,
        /// An instruction put before every text (wins over --prompt-name).
        #[arg(long)]
        prompt: Option<String>,
        /// Keep the first N dimensions (Matryoshka), re-normalized when the model normalizes.
        #[arg(long, allow_negative_numbers = true)]
        dimensions: Option<usize>,
        #[arg(long)]
        json: bool,
    },
    /// Self-check for bug reports: a small random model through every kernel variant this
    /// adapter selected against a CPU reference, and with --model and --reference the model's
    /// own logits after the reference's tokens. Exit status 1 when a check fails.
    Diagnose {
        /// A model to load (its device is checked, and --reference applies to it).
        #[arg(long)]
        model: Option<String>,
        /// JSON {"tokens": [ids], "top": [[id, logit], ...], "tolerance"?}: the model's expected
        /// logits after those tokens (e.g. from transformers).
        #[arg(long)]
        reference: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Tokenize text like HF `tokenizer(text, add_special_tokens=False)`.
    Tokenize {
        #[arg(long)]
        model: String,
        #[arg(long)]
        text: String,
        #[arg(long)]
        json: bool,
    },
    /// Measure prefill and decode speed (medians over repetitions).
    Bench {
        #[arg(long)]
        model: String,
        #[arg(long, allow_negative_numbers = true, default_value_t = 512)]
        prompt_len: usize,
        #[arg(long, allow_negative_numbers = true, default_value_t = 128)]
        gen: usize,
        /// Tokens of context before decoding starts (default: the prompt length).
        #[arg(long, allow_negative_numbers = true)]
        depth: Option<usize>,
        #[arg(long, allow_negative_numbers = true, default_value_t = 5)]
        reps: usize,
        /// Decode steps on the GPU before the oldest one's token is read back (default: as a
        /// generation keeps them).
        #[arg(long, allow_negative_numbers = true)]
        inflight: Option<usize>,
        /// Decode sampling on the GPU with these options (greedy argmax without them).
        #[command(flatten)]
        sampling: SamplingArgs,
        #[arg(long)]
        json: bool,
    },
    /// Show a model file's metadata and tensor table.
    Inspect {
        #[arg(long)]
        model: String,
        #[arg(long)]
        json: bool,
    },
    /// Write a random-weight GGUF of a real model's shape, for speed benchmarks (see ferrolm::synth).
    MakeGguf {
        /// smollm2-135m, llama-3.2-1b, qwen2.5-0.5b, phi-3-mini, llama-3.1-8b, qwen3.5-0.8b or
        /// bitnet-2b.
        #[arg(long)]
        shape: String,
        /// f16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs, mxfp4,
        /// tq1_0 or tq2_0 (K-quants: rows not a multiple of 256 get llama.cpp's fallback type).
        #[arg(long = "type")]
        ty: String,
        #[arg(long)]
        out: String,
        /// GGUF to borrow the tokenizer from (default: $FERROLM_MODEL or the SmolLM2 model in ~/.cache/ferrolm).
        #[arg(long)]
        tokenizer_from: Option<String>,
        #[arg(long, allow_negative_numbers = true, default_value_t = 0)]
        seed: u64,
        /// Keep only the first N layers.
        #[arg(long, allow_negative_numbers = true)]
        layers: Option<u64>,
    },
}

#[derive(Args)]
struct ModelArgs {
    /// A GGUF file, a Hugging Face model folder (config.json + *.safetensors) or an MLC-LLM folder
    /// (mlc-chat-config.json + tensor-cache.json / ndarray-cache.json + params_shard_*.bin).
    #[arg(long)]
    model: String,
    /// Quantize a folder's F32/F16/BF16 weights at load: none, q8_0 or q4_0.
    #[arg(long, default_value = "none")]
    quantize: String,
    /// KV cache length in tokens (default: min(training context, 4096), grown to hold a longer
    /// prompt plus --max-tokens).
    #[arg(long, allow_negative_numbers = true)]
    context: Option<usize>,
}

// Numeric options take `allow_negative_numbers`: a negative value given as its own argument
// (`--frequency-penalty -0.5`, `--temperature -1`) then reaches the option's range check instead of
// clap taking it for an unknown flag.
#[derive(Args)]
struct SamplingArgs {
    /// 0 = greedy.
    #[arg(long, allow_negative_numbers = true, value_parser = finite_f32)]
    temperature: Option<f32>,
    #[arg(long, allow_negative_numbers = true)]
    top_k: Option<usize>,
    #[arg(long, allow_negative_numbers = true, value_parser = finite_f32)]
    top_p: Option<f32>,
    #[arg(long, allow_negative_numbers = true, value_parser = finite_f32)]
    min_p: Option<f32>,
    #[arg(long, alias = "repeat-penalty", allow_negative_numbers = true, value_parser = finite_f32)]
    repetition_penalty: Option<f32>,
    /// OpenAI's frequency penalty (-2..2) over the tokens generated so far.
    #[arg(long, allow_negative_numbers = true, value_parser = finite_f32)]
    frequency_penalty: Option<f32>,
    /// OpenAI's presence penalty (-2..2) over the tokens generated so far.
    #[arg(long, allow_negative_numbers = true, value_parser = finite_f32)]
    presence_penalty: Option<f32>,
    /// Random seed (default: from the clock); the same seed gives the same output.
    #[arg(long, allow_negative_numbers = true)]
    seed: Option<u64>,
}

impl SamplingArgs {
    /// Whether any sampling option was given.
    fn any(&self) -> bool {
        self.temperature.is_some()
            || self.top_k.is_some()
            || self.top_p.is_some()
            || self.min_p.is_some()
            || self.repetition_penalty.is_some()
            || self.frequency_penalty.is_some()
            || self.presence_penalty.is_some()
            || self.seed.is_some()
    }

    fn params(&self, default: SamplingParams) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature.unwrap_or(default.temperature),
            top_k: self.top_k.unwrap_or(default.top_k),
            top_p: self.top_p.unwrap_or(default.top_p),
            min_p: self.min_p.unwrap_or(default.min_p),
            repetition_penalty: self.repetition_penalty.unwrap_or(default.repetition_penalty),
            frequency_penalty: self.frequency_penalty.unwrap_or(default.frequency_penalty),
            presence_penalty: self.presence_penalty.unwrap_or(default.presence_penalty),
            logit_bias: default.logit_bias,
            seed: self.seed.unwrap_or_else(clock_seed),
        }
    }
}

#[derive(Args)]
struct GenerateArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Raw text (BOS only if the model says add_bos).
    #[arg(long, group = "input")]
    prompt: Option<String>,
    /// A user message, formatted with the model's chat template.
    #[arg(long, group = "input")]
    chat: Option<String>,
    /// Exactly these token ids, comma-separated.
    #[arg(long, group = "input")]
    prompt_ids: Option<String>,
    /// System message for --chat.
    #[arg(long)]
    system: Option<String>,
    #[arg(long, allow_negative_numbers = true, default_value_t = ferrolm::generation::DEFAULT_MAX_TOKENS)]
    max_tokens: usize,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// Report the K largest raw logits of the first generated position.
    #[arg(long, allow_negative_numbers = true, default_value_t = 0)]
    top_logits: usize,
    /// Stop when the text contains this string (not included in the output); repeatable.
    #[arg(long)]
    stop: Vec<String>,
    /// Keep generating past the model's end-of-text tokens (until --max-tokens or a --stop
    /// string), as `stopIds: []` does in the package.
    #[arg(long)]
    ignore_eos: bool,
    /// Report each generated token's log-probability with K alternatives (0..=20; --json).
    #[arg(long, allow_negative_numbers = true)]
    logprobs: Option<usize>,
    /// The output must be a JSON value valid under the JSON schema in FILE.
    #[arg(long, value_name = "FILE", group = "constraint")]
    json_schema: Option<String>,
    /// The output must be a JSON object.
    #[arg(long, group = "constraint")]
    json_object: bool,
    /// The output must follow the grammar in FILE: GBNF (llama.cpp's, `root ::= ...`) or Lark.
    #[arg(long, value_name = "FILE", group = "constraint")]
    grammar: Option<String>,
    /// Print one JSON object (last line of stdout) instead of streaming text.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ChatArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[arg(long)]
    system: Option<String>,
    #[arg(long, allow_negative_numbers = true, default_value_t = 512)]
    max_tokens: usize,
    #[command(flatten)]
    sampling: SamplingArgs,
}

/// A float option's value: a number that fits in 32 bits (1e308 would become infinity and be
/// reported as `inf`, not as what was typed).
fn finite_f32(s: &str) -> std::result::Result<f32, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("{s:?} is not a number"))?;
    let f = v as f32;
    if !f.is_finite() {
        return Err(format!("{s} is not a finite 32-bit number"));
    }
    Ok(f)
}

/// A seed from the clock, for requests that give none.
fn clock_seed() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

fn main() {
    // Piping into `head` must end the program quietly, not panic on a closed stdout.
    #[cfg(unix)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    ferrolm::warnings::install();
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Generate(a) => generate(a),
        Cmd::Chat(a) => chat(a),
        Cmd::ChatCompletion { model, request } => chat_completion(&model, &request),
        Cmd::Embed { model, text, ids, prompt_name, prompt, dimensions, json } => {
            let ids = ids.iter().map(|s| parse_ids("--ids", s)).collect::<Result<Vec<_>>>();
            ids.and_then(|ids| embed(&model, text, ids, prompt_name, prompt, dimensions, json))
        }
        Cmd::Diagnose { model, reference, json } => diagnose(model, reference, json),
        Cmd::Tokenize { model, text, json } => tokenize(&model, &text, json),
        Cmd::Inspect { model, json } => inspect(&model, json),
        Cmd::Bench { model, prompt_len, gen, depth, reps, inflight, sampling, json } => {
            let sampling = sampling.any().then(|| sampling.params(SamplingParams { seed: 1, ..Default::default() }));
            let o = ferrolm::bench::BenchOptions { prompt_len, gen, depth, reps, sampling, inflight };
            bench(&model, &o, json)
        }
        Cmd::MakeGguf { shape, ty, out, tokenizer_from, seed, layers } => {
            make_gguf(&shape, &ty, &out, tokenizer_from, seed, layers)
        }
    };
    // Output still buffered (a line without its newline) fails here, not silently at exit.
    let res = res.and_then(|_| std::io::stdout().flush().map_err(|e| Error::write("stdout", e)));
    if let Err(e) = res {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn load(m: &ModelArgs, quiet: bool) -> Result<Engine> {
    let opts = LoadOptions { context_length: m.context, quantize: m.quantize.parse()?, ..Default::default() };
    let mut last = 0u64;
    let mut progress = |phase: &str, done: u64, total: u64| {
        if !quiet && phase == "upload" && (done - last > 32 << 20 || done == total) {
            last = done;
            eprint!("\rloading {}: {} / {} MiB", m.model, done >> 20, total >> 20);
            if done == total {
                eprintln!();
            }
        }
    };
    block_on(Engine::load_path(std::path::Path::new(&m.model), &opts, &mut progress))
}

fn bench(model: &str, o: &ferrolm::bench::BenchOptions, json: bool) -> Result<()> {
    o.validate()?;
    let ctx = ferrolm::bench::context_needed(o);
    let opts = LoadOptions { context_length: Some(ctx), max_batch: o.prompt_len.clamp(1, 512), ..Default::default() };
    let mut engine = block_on(Engine::load_path(std::path::Path::new(model), &opts, &mut |_, _, _| {}))?;
    let r = block_on(ferrolm::bench::run(&mut engine, o))?;
    if json {
        outln!("{}", serde_json::json!(r));
    } else {
        outln!(
            "{} on {} ({})",
            model,
            r.adapter["name"].as_str().unwrap_or("?"),
            r.adapter["backend"].as_str().unwrap_or("?")
        );
        outln!("prefill pp{}: {:.0} tok/s, first token after {:.1} ms", r.prompt_len, r.prefill_tok_s, r.ttft_ms);
        outln!(
            "decode tg{}{} at depth {}: {:.1} tok/s ({:.3} ms/token, GPU {} ms/step, CPU {:.3} ms/step to record and submit)",
            r.gen,
            if r.sampling.is_some() { " sampled" } else { "" },
            r.depth,
            r.decode_tok_s,
            r.ms_per_token,
            r.gpu_ms_per_step.map_or("n/a".to_string(), |v| format!("{v:.3}")),
            r.cpu_ms_per_step
        );
        outln!(
            "{} dispatches, {} submit, {} readback per token; {:.1} GB/s effective; {} MiB GPU memory",
            r.dispatches_per_token,
            r.submits_per_token,
            r.readbacks_per_token,
            r.effective_gb_s,
            r.gpu_memory_bytes >> 20
        );
        for (what, prof) in [("decode step", &r.decode_profile), ("prefill step", &r.prefill_profile)] {
            if let Some(p) = prof {
                let total: f64 = p.iter().map(|k| k.2).sum();
                outln!("GPU time per kernel, one {what} ({total:.3} ms):");
                for (k, n, ms) in p {
                    outln!("  {k:<10} {n:>4} dispatches {ms:>8.3} ms ({:>4.1}%)", 100.0 * ms / total);
                }
            }
        }
    }
    Ok(())
}

/// Exactly these ids: an empty item (`1,,2`) is an error, not skipped.
/// --max-tokens 0 would print nothing and succeed (a chat request's max_tokens 0 is refused too).
fn at_least_one_token(max_tokens: usize) -> Result<()> {
    if max_tokens == 0 {
        return Err(Error::InvalidOption("--max-tokens must be at least 1".into()));
    }
    Ok(())
}

fn parse_ids(option: &str, s: &str) -> Result<Vec<u32>> {
    s.split(',')
        .map(|p| p.trim())
        .map(|p| p.parse::<u32>().map_err(|_| Error::InvalidOption(format!("{option}: {p:?} is not a token id"))))
        .collect()
}

fn generate(a: GenerateArgs) -> Result<()> {
    let sampling = a.sampling.params(SamplingParams::default());
    sampling.validate()?;
    let ids_arg = a.prompt_ids.as_deref().map(|s| parse_ids("--prompt-ids", s)).transpose()?;
    if a.prompt.is_none() && a.chat.is_none() && ids_arg.is_none() {
        return Err(Error::InvalidOption("give one of --prompt, --chat or --prompt-ids".into()));
    }
    // Options that would have no effect are refused rather than ignored.
    if a.system.is_some() && a.chat.is_none() {
        return Err(Error::InvalidOption("--system goes with --chat (the system message of that chat)".into()));
    }
    if !a.json && (a.logprobs.is_some() || a.top_logits > 0) {
        return Err(Error::InvalidOption(
            "--logprobs and --top-logits are reported in the --json output: add --json".into(),
        ));
    }
    at_least_one_token(a.max_tokens)?;
    if let Some(k) = a.logprobs.filter(|&k| k > ferrolm::generation::MAX_TOP_LOGPROBS) {
        return Err(Error::InvalidOption(format!(
            "--logprobs takes 0 to {} alternatives, got {k}",
            ferrolm::generation::MAX_TOP_LOGPROBS
        )));
    }
    let mut engine = load(&a.model, a.json)?;
    let prompt = if let Some(ids) = ids_arg {
        ids
    } else if let Some(text) = &a.prompt {
        engine.prompt_ids(text)?
    } else {
        let mut msgs = Vec::new();
        if let Some(s) = &a.system {
            msgs.push(ChatMessage { role: "system".into(), content: s.clone() });
        }
        msgs.push(ChatMessage { role: "user".into(), content: a.chat.clone().unwrap_or_default() });
        engine.chat_ids(&msgs)?
    };
    let read = read_file;
    let constraint = if let Some(f) = &a.json_schema {
        let schema = serde_json::from_str(&read(f)?)
            .map_err(|e| Error::InvalidOption(format!("--json-schema {f}: not JSON: {e}")))?;
        Some(ferrolm::constrain::ConstraintSpec::JsonSchema(schema))
    } else if let Some(f) = &a.grammar {
        Some(ferrolm::constrain::ConstraintSpec::grammar(&read(f)?))
    } else {
        a.json_object.then_some(ferrolm::constrain::ConstraintSpec::JsonObject)
    };
    let opts = GenerateOptions {
        max_tokens: a.max_tokens,
        sampling,
        stop: a.stop.clone(),
        stop_ids: a.ignore_eos.then(Vec::new),
        top_logits: a.top_logits,
        logprobs: a.logprobs,
        constraint,
        ..Default::default()
    };
    opts.validate()?;
    let json = a.json;
    let mut out = Stream::new();
    let gen = block_on(engine.generate(&prompt, &opts, &mut |_, piece| json || out.piece(piece)))?;
    out.finish()?;
    if json {
        let mut v = serde_json::json!({
            "prompt_ids": gen.prompt_ids,
            "tokens": gen.tokens,
            "text": gen.text,
            "stats": gen.stats,
        });
        if a.logprobs.is_some() {
            v["logprobs"] = serde_json::json!(gen.logprobs);
        }
        if a.top_logits > 0 {
            v["top_logits"] =
                serde_json::json!(gen.top_logits.iter().map(|&(i, l)| serde_json::json!([i, l])).collect::<Vec<_>>());
        }
        v["stats"]["adapter"] = serde_json::json!(engine.rt.gpu.summary);
        outln!("{v}");
    } else {
        outln!();
        eprintln!(
            "[{} prompt tokens, {:.1} tok/s prefill; {} generated, {:.1} tok/s; stop: {:?}]",
            gen.stats.prompt_tokens,
            gen.stats.prefill_tok_s,
            gen.tokens.len(),
            gen.stats.decode_tok_s,
            gen.stats.stop_reason
        );
    }
    Ok(())
}

fn chat(a: ChatArgs) -> Result<()> {
    let defaults = SamplingParams { temperature: 0.7, top_p: 0.9, repetition_penalty: 1.1, ..Default::default() };
    let sampling = a.sampling.params(defaults);
    sampling.validate()?;
    at_least_one_token(a.max_tokens)?;
    let mut engine = load(&a.model, false)?;
    let mut msgs = Vec::new();
    if let Some(s) = &a.system {
        msgs.push(ChatMessage { role: "system".into(), content: s.clone() });
    }
    eprintln!("chatting with {} on {} (empty line or Ctrl-D to quit)", a.model.model, engine.rt.gpu.summary.name);
    let stdin = std::io::stdin();
    loop {
        eprint!("> ");
        let mut bytes = Vec::new();
        let n = std::io::Read::take(stdin.lock(), MAX_INPUT_BYTES + 1)
            .read_until(b'\n', &mut bytes)
            .map_err(|e| Error::io("stdin", e))?;
        if n as u64 > MAX_INPUT_BYTES {
            return Err(too_long("stdin", "a line of more than"));
        }
        let line = String::from_utf8(bytes).map_err(|_| {
            Error::io(
                "stdin",
                std::io::Error::new(std::io::ErrorKind::InvalidData, "stream did not contain valid UTF-8"),
            )
        })?;
        if n == 0 || line.trim().is_empty() {
            return Ok(());
        }
        msgs.push(ChatMessage { role: "user".into(), content: line.trim_end().to_string() });
        let ids = engine.chat_ids(&msgs)?;
        let room = engine.rt.context.saturating_sub(ids.len());
        if room == 0 {
            return Err(Error::ContextOverflow {
                tokens: ids.len(),
                max_new: a.max_tokens,
                context: engine.rt.context,
            });
        }
        let opts =
            GenerateOptions { max_tokens: a.max_tokens.min(room), sampling: sampling.clone(), ..Default::default() };
        let mut out = Stream::new();
        let gen = block_on(engine.generate(&ids, &opts, &mut |_, piece| out.piece(piece)))?;
        out.finish()?;
        outln!();
        msgs.push(ChatMessage { role: "assistant".into(), content: gen.text.trim().to_string() });
    }
}

fn chat_completion(m: &ModelArgs, requests: &[String]) -> Result<()> {
    // Standard input holds one request: a second `-` would read it empty.
    if requests.iter().filter(|f| *f == "-").count() > 1 {
        return Err(Error::InvalidOption("--request - (standard input) can be given once".into()));
    }
    let reqs = requests
        .iter()
        .map(|f| {
            let text = if f == "-" { read_input("stdin", std::io::stdin())? } else { read_file(f)? };
            ferrolm::chat::ChatRequest::from_json(&text).map_err(|e| named(f, e))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut engine = load(m, true)?;
    let mut out = std::io::stdout();
    for (i, req) in reqs.iter().enumerate() {
        let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let mut run =
            ferrolm::chat::ChatRun::new(&mut engine, req, clock_seed(), created, format!("chatcmpl-ferrolm-{i}"))
                .map_err(|e| named(&requests[i], e))?;
        // Options the engine refuses as the run starts (a schema that does not compile, a
        // logit bias past the vocabulary) are the request's too.
        if run.is_stream() {
            while let Some(chunk) = block_on(run.next_chunk(&mut engine)).map_err(|e| named(&requests[i], e))? {
                writeln!(out, "{chunk}").and_then(|_| out.flush()).map_err(|e| Error::write("stdout", e))?;
            }
        } else {
            let r = block_on(run.complete(&mut engine)).map_err(|e| named(&requests[i], e))?;
            writeln!(out, "{r}").and_then(|_| out.flush()).map_err(|e| Error::write("stdout", e))?;
        }
    }
    Ok(())
}

/// A request's invalid option, with the request file it came from (of several, which one).
fn named(file: &str, e: Error) -> Error {
    match e {
        Error::InvalidOption(m) => {
            Error::InvalidOption(format!("{}: {m}", if file == "-" { "standard input" } else { file }))
        }
        e => e,
    }
}

fn embed(
    m: &ModelArgs,
    texts: Vec<String>,
    ids: Vec<Vec<u32>>,
    prompt_name: Option<String>,
    prompt: Option<String>,
    dimensions: Option<usize>,
    json: bool,
) -> Result<()> {
    if texts.iter().filter(|t| *t == "-").count() > 1 {
        return Err(Error::InvalidOption("--text -: standard input holds one list of texts; give `-` once".into()));
    }
    let mut all = Vec::new();
    for t in texts {
        if t == "-" {
            all.extend(read_input("stdin", std::io::stdin())?.lines().map(str::to_string));
        } else {
            all.push(t);
        }
    }
    let mut req =
        ferrolm::embed::EmbedRequest { prompt_name, prompt, dimensions, ..ferrolm::embed::EmbedRequest::texts(all) };
    if !ids.is_empty() {
        req.input = ferrolm::embed::EmbedInput::ManyIds(ids);
    }
    let mut engine = load(m, json)?;
    let r = block_on(engine.embed(&req))?;
    if json {
        outln!("{r}");
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    for d in r["data"].as_array().into_iter().flatten() {
        let v: Vec<String> = d["embedding"].as_array().into_iter().flatten().map(|x| x.to_string()).collect();
        writeln!(out, "{}", v.join(" ")).map_err(|e| Error::write("stdout", e))?;
    }
    Ok(())
}

fn diagnose(model: Option<String>, reference: Option<String>, json: bool) -> Result<()> {
    let reference: Option<ferrolm::diagnose::Reference> = match &reference {
        Some(f) => {
            let text = read_file(f)?;
            Some(serde_json::from_str(&text).map_err(|e| Error::InvalidOption(format!("--reference {f}: {e}")))?)
        }
        None => None,
    };
    let r = match model {
        Some(m) => {
            let args = ModelArgs { model: m, quantize: "none".into(), context: None };
            let mut engine = load(&args, json)?;
            block_on(engine.diagnose(reference.as_ref()))?
        }
        None if reference.is_some() => {
            return Err(Error::InvalidOption("--reference needs --model".into()));
        }
        None => block_on(ferrolm::diagnose::run_without_model())?,
    };
    if json {
        outln!("{r}");
    } else {
        let a = &r["adapter"];
        outln!("adapter: {} ({}, {}, driver {})", a["name"], a["backend"], a["deviceType"], a["driver"]);
        outln!("limits: {}", r["limits"]);
        outln!("variants: {}", r["variants"]);
        if let Some(m) = r.get("model") {
            outln!("model: {}", m["source"]);
        }
        for c in r["checks"].as_array().into_iter().flatten() {
            outln!(
                "{:<8} {}  error {:.2e} (tolerance {:.0e})  {}",
                c["name"].as_str().unwrap_or("?"),
                if c["passed"] == true { "ok  " } else { "FAIL" },
                c["maxError"].as_f64().unwrap_or(f64::NAN),
                c["tolerance"].as_f64().unwrap_or(f64::NAN),
                c["detail"].as_str().unwrap_or("")
            );
        }
    }
    if r["passed"] != true {
        return Err(Error::Gpu("a diagnose check failed (see the report above)".into()));
    }
    Ok(())
}

fn tokenize(model: &str, text: &str, json: bool) -> Result<()> {
    let path = std::path::Path::new(model);
    let tok = if path.is_dir() {
        let read = |f: &str| std::fs::read_to_string(path.join(f));
        let tj = read("tokenizer.json").map_err(|e| Error::io(path.join("tokenizer.json").display().to_string(), e))?;
        ferrolm::tokenizer::Tokenizer::from_hf_json(&tj, read("tokenizer_config.json").ok().as_deref())?
    } else {
        let src = FileSource::open(model)?;
        ferrolm::tokenizer::Tokenizer::from_gguf(&GgufFile::read(&src)?)?
    };
    let ids = tok.encode(text)?;
    if json {
        outln!("{}", serde_json::json!({ "ids": ids }));
    } else {
        outln!("{}", ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(" "));
    }
    Ok(())
}

/// A key or tensor name as read from the file: quoted and escaped when it holds control
/// characters, so a hostile file cannot write escape sequences or forge lines on the terminal.
fn name_text(s: &str) -> std::borrow::Cow<'_, str> {
    if s.chars().any(char::is_control) {
        format!("{s:?}").into()
    } else {
        s.into()
    }
}

fn short(v: &Value) -> String {
    match v {
        Value::String(s) if s.chars().count() > 80 => {
            format!("{:?}… ({} bytes)", s.chars().take(80).collect::<String>(), s.len())
        }
        Value::String(s) => format!("{s:?}"),
        Value::Array(a) if a.len() > 8 => {
            format!("[{} items: {}, …]", a.len(), a.iter().take(4).map(short).collect::<Vec<_>>().join(", "))
        }
        Value::Array(a) => format!("[{}]", a.iter().map(short).collect::<Vec<_>>().join(", ")),
        Value::F32(x) => format!("{x}"),
        Value::F64(x) => format!("{x}"),
        Value::Bool(b) => format!("{b}"),
        other => other.as_i64().map(|i| i.to_string()).unwrap_or_else(|| format!("{other:?}")),
    }
}

/// A metadata value as typed JSON: numbers, booleans and strings as themselves, arrays of up to
/// 64 items whole, longer ones (a vocabulary) as their length, item type and first 8 items.
/// JSON has no NaN or infinities: those floats become their names as strings.
fn meta_json(v: &Value) -> serde_json::Value {
    use serde_json::json;
    let float =
        |x: f64| serde_json::Number::from_f64(x).map_or_else(|| json!(x.to_string()), serde_json::Value::Number);
    match v {
        Value::String(s) => json!(s),
        Value::Bool(b) => json!(b),
        // Through its shortest decimal form: `as f64` would print 1e-5 as 9.999999747378752e-6.
        Value::F32(x) => float(x.to_string().parse().unwrap_or(*x as f64)),
        Value::F64(x) => float(*x),
        Value::U64(x) => json!(x),
        Value::Array(a) if a.len() > 64 => json!({
            "length": a.len(),
            "type": a.first().map_or("none", |x| x.type_name()),
            "head": a.iter().take(8).map(meta_json).collect::<Vec<_>>(),
        }),
        Value::Array(a) => serde_json::Value::Array(a.iter().map(meta_json).collect()),
        other => other.as_i64().map_or_else(|| json!(format!("{other:?}")), |i| json!(i)),
    }
}

fn inspect(model: &str, json: bool) -> Result<()> {
    let path = std::path::Path::new(model);
    if path.is_dir() {
        let files = ferrolm::model::hf::read_dir_files(path)?;
        let hf = ferrolm::model::hf_config::HfConfig::from_json(&files.config)?;
        let cfg = ferrolm::model::ModelConfig::from_hf(&hf);
        let st = match &files.mlc {
            // An MLC folder's tensors, under the names the loader maps them to (mlc::hf_name).
            Some(w) => ferrolm::gpu::block_on(ferrolm::model::mlc::open_tensors(w, |f| {
                let p = path.join(f);
                async move { FileSource::open(p) }
            }))?,
            None => ferrolm::weights::safetensors::open_dir(path)?,
        };
        let names: Vec<&str> = st.tensor_names().collect();
        if json {
            let cfg =
                cfg.map(|c| serde_json::json!(c)).unwrap_or_else(|e| serde_json::json!({ "error": e.to_string() }));
            outln!("{}", serde_json::json!({ "config": cfg, "tensors": names }));
        } else {
            let kind = if files.mlc.is_some() { "MLC" } else { "Hugging Face" };
            outln!("{model}: {kind} folder, model_type {}, {} tensors", hf.model_type, names.len());
            match cfg {
                Ok(c) => outln!("config: {}", serde_json::json!(c)),
                Err(e) => outln!("config: not runnable: {e}"),
            }
            for n in names {
                outln!("  {}", name_text(n));
            }
        }
        return Ok(());
    }
    let src = FileSource::open(model)?;
    let g = GgufFile::read(&src)?;
    let cfg = ferrolm::model::ModelConfig::from_gguf(&g);
    if json {
        let meta: serde_json::Map<String, serde_json::Value> =
            g.metadata.iter().map(|(k, v)| (k.clone(), meta_json(v))).collect();
        let tensors: Vec<_> = g
            .tensors
            .iter()
            .map(|t| serde_json::json!({"name": t.name, "type": t.ty.name(), "dims": t.dims, "offset": t.offset, "bytes": t.n_bytes}))
            .collect();
        let cfg = match &cfg {
            Ok(c) => serde_json::json!(c),
            Err(e) => serde_json::json!({ "error": e.to_string() }),
        };
        outln!(
            "{}",
            serde_json::json!({"version": g.version, "alignment": g.alignment, "metadata": meta, "tensors": tensors, "config": cfg})
        );
        return Ok(());
    }
    outln!(
        "{model}: GGUF v{}, {} metadata keys, {} tensors, data at byte {}",
        g.version,
        g.metadata.len(),
        g.tensors.len(),
        g.data_offset
    );
    for (k, v) in &g.metadata {
        outln!("  {} = {}", name_text(k), short(v));
    }
    match cfg {
        Ok(c) => outln!("config: {}", serde_json::json!(c)),
        Err(e) => outln!("config: not runnable: {e}"),
    }
    let total: u64 = g.tensors.iter().map(|t| t.n_bytes).sum();
    outln!("tensors ({} MiB):", total >> 20);
    for t in &g.tensors {
        outln!("  {:<40} {:<5} {:?}", name_text(&t.name), t.ty.name(), t.dims);
    }
    Ok(())
}

fn make_gguf(
    shape: &str,
    ty: &str,
    out: &str,
    tokenizer_from: Option<String>,
    seed: u64,
    layers: Option<u64>,
) -> Result<()> {
    use ferrolm::synth;
    let shape = synth::shape(shape).ok_or_else(|| {
        Error::InvalidOption(format!("--shape {shape:?}: expected one of {}", synth::shape_names().join(", ")))
    })?;
    let ty = synth::parse_type(ty)?;
    let tok_path = tokenizer_from.map(std::path::PathBuf::from).unwrap_or_else(synth::default_tokenizer_path);
    let tok = GgufFile::read(&FileSource::open(&tok_path)?)?;
    // The borrowed vocabulary takes the shape's size (synth's docs); say so when that changes it.
    if let Some(n) = tok.get_str_array("tokenizer.ggml.tokens")?.map(|t| t.len() as u64) {
        let (src, want) = (tok_path.display(), shape.vocab);
        if n < want {
            eprintln!(
                "note: {src} has {n} tokens, the {} shape {want}: padded with {} unused ones",
                shape.name,
                want - n
            );
        } else if n > want {
            eprintln!(
                "warning: {src} has {n} tokens, the {} shape {want}: cut to the first {want}, so text that \
                 needs the others tokenizes differently than with {src}",
                shape.name
            );
        }
    }
    let opts = synth::SynthOptions { shape, ty, seed, layers, sparse: false };
    let r = synth::write(&opts, &tok, std::path::Path::new(out), &mut |done| eprint!("\r{out}: {} MiB", done >> 20))?;
    eprintln!();
    if !r.fallback.is_empty() {
        eprintln!(
            "{} matrices fall back to llama.cpp's type for their input dimension, e.g. {}",
            r.fallback.len(),
            r.fallback[0]
        );
    }
    eprintln!(
        "{out}: {} tensors, {} bytes in {:.2} s ({:.0} MB/s)",
        r.tensors,
        r.bytes,
        r.seconds,
        r.bytes as f64 / 1e6 / r.seconds
    );
    Ok(())
}
