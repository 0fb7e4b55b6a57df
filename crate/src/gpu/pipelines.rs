//! One WGSL file per kernel role (shaders/), embedded at build time, specialised with WGSL
//! `override` constants, and cached by (kernel, constants) so each variant compiles once.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// A file of shaders/: its name and its text as built in.
#[derive(Clone, Copy)]
struct File(#[cfg_attr(target_arch = "wasm32", allow(dead_code))] &'static str, &'static str);

macro_rules! shader {
    ($name:literal) => {
        File($name, include_str!(concat!("../../../shaders/", $name)))
    };
}

impl File {
    /// The built-in text, or natively, where `FERROLM_SHADER_DIR` names a directory holding a
    /// file of this name, that file's: kernel variants measured against each other with one
    /// binary (scripts/device-variants.sh), not a way to ship kernels.
    fn text(self) -> Cow<'static, str> {
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(dir) = std::env::var_os("FERROLM_SHADER_DIR") {
            if let Ok(t) = std::fs::read_to_string(std::path::Path::new(&dir).join(self.0)) {
                return Cow::Owned(t);
            }
        }
        Cow::Borrowed(self.1)
    }
}

const STEP: File = shader!("step.wgsl");
const LAYOUT: File = shader!("layout.wgsl");
const WEIGHTS: File = shader!("weights.wgsl");
const REDUCE_SG: File = shader!("reduce_sg.wgsl");
const REDUCE_WG: File = shader!("reduce_wg.wgsl");
const ROWDOT: File = shader!("rowdot.wgsl");
const ATTN_MERGE: File = shader!("attn_merge.wgsl");
const MATMUL_OUT: File = shader!("matmul_out.wgsl");
const MATMUL_TILE: File = shader!("matmul_tile.wgsl");
const MATMUL_F16: File = shader!("matmul_f16.wgsl");
const ROPE: File = shader!("rope.wgsl");
const PACK_H2: File = shader!("pack_h2.wgsl");
const QUANT_BLOCK: File = shader!("quant_block.wgsl");
const GLU: File = shader!("glu.wgsl");
const I8_SMX: File = shader!("i8_smx.wgsl");
const I8_DOT: File = shader!("i8_dot.wgsl");
/// `enable` directives of the matrix-unit kernels and of to_f16.wgsl; they must open the
/// assembled source.
const COOP_ENABLES: &str = "enable f16;\nenable wgpu_cooperative_matrix;\n";
const F16_ENABLE: &str = "enable f16;\n";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    MatVec,
    QkvRope,
    /// Decode's whole FFN of a small model, split over its width (ffn_split.wgsl).
    FfnSplit,
    /// The prefill matmul in f32 (any adapter).
    MatMul,
    /// The prefill matmul on matrix units in 64x64 tiles (chosen by the forward pass only
    /// where `Pipelines::matrix_units`), and in 128x128 tiles for wide matrices; both read A
    /// in f16 as `ToF16` leaves it.
    MatMulCoop,
    MatMulWide,
    /// Sums the partial products of a split-K `MatMulWide` (matmul_sum.wgsl).
    MatMulSum,
    /// The prefill matmul of quantized weights on 8-bit integers (browsers with 8-bit subgroup
    /// matrices; packed dot products in the kernel tests), from A as `QuantRows` leaves it.
    MatMulI8,
    QuantRows,
    ToF16,
    Embed,
    RmsNorm,
    RopeKv,
    Attention,
    /// Prefill attention on matrix units (chosen by the forward pass only where
    /// `Pipelines::matrix_units` and the layer's shape allows).
    AttentionCoop,
    /// Merges the key splits of `AttentionCoop` over a long cache.
    AttnPrefillMerge,
    AttnDecode,
    AttnCombine,
    FfnAct,
    Argmax,
    Sample,
    Mask,
    /// Gated DeltaNet (Qwen3.5): the causal convolution, the recurrence, and the gated
    /// attention output of the full-attention layers.
    Conv1d,
    DeltaPrep,
    DeltaRule,
    GatedNorm,
    AttnGate,
    /// Which lane each invocation is in its subgroup (subgroup_layout.wgsl): run once when a
    /// device opens, before the kernels that rely on the layout are chosen.
    SubgroupLayout,
}

impl Kernel {
    pub const ALL: [Kernel; 28] = [
        Kernel::MatVec,
        Kernel::QkvRope,
        Kernel::FfnSplit,
        Kernel::MatMul,
        Kernel::MatMulCoop,
        Kernel::MatMulWide,
        Kernel::MatMulSum,
        Kernel::MatMulI8,
        Kernel::QuantRows,
        Kernel::ToF16,
        Kernel::Embed,
        Kernel::RmsNorm,
        Kernel::RopeKv,
        Kernel::Attention,
        Kernel::AttentionCoop,
        Kernel::AttnPrefillMerge,
        Kernel::AttnDecode,
        Kernel::AttnCombine,
        Kernel::FfnAct,
        Kernel::Argmax,
        Kernel::Sample,
        Kernel::Mask,
        Kernel::Conv1d,
        Kernel::DeltaPrep,
        Kernel::DeltaRule,
        Kernel::GatedNorm,
        Kernel::AttnGate,
        Kernel::SubgroupLayout,
    ];
}

#[derive(Clone, Copy)]
enum Slot {
    Read,
    ReadWrite,
    Uniform,
}

/// Shared WGSL a kernel is assembled with: the weight layout and block metadata (layout.wgsl) for
/// every kernel that reads weights (`layout`), then the word dequantizer (prefill and embedding),
/// or for the decode matrix-vector kernels the row reduction and the four-row dot product (which
/// reads the weights with 128-bit loads itself); the 8-bit matmul reads the blocks' words itself.
/// Both halves of decode attention share the split merge. Every kernel gets the step uniform
/// (step.wgsl).
struct Source {
    body: File,
    layout: bool,
    weights: bool,
    reduce: bool,
    merge: bool,
}

impl Kernel {
    fn source(self) -> Source {
        let (body, weights, reduce) = match self {
            Kernel::MatVec => (shader!("matvec.wgsl"), false, true),
            Kernel::QkvRope => (shader!("qkv_rope.wgsl"), false, true),
            Kernel::FfnSplit => (shader!("ffn_split.wgsl"), false, true),
            Kernel::MatMul => (shader!("matmul.wgsl"), true, false),
            Kernel::MatMulCoop => (shader!("matmul_coop.wgsl"), true, false),
            Kernel::MatMulWide => (shader!("matmul_coop_wide.wgsl"), true, false),
            Kernel::MatMulSum => (shader!("matmul_sum.wgsl"), false, false),
            Kernel::MatMulI8 => (shader!("matmul_i8.wgsl"), false, false),
            Kernel::QuantRows => (shader!("quant_rows.wgsl"), false, false),
            Kernel::ToF16 => (shader!("to_f16.wgsl"), false, false),
            Kernel::Embed => (shader!("embed.wgsl"), true, false),
            Kernel::RmsNorm => (shader!("rmsnorm.wgsl"), false, false),
            Kernel::RopeKv => (shader!("rope_kv.wgsl"), false, false),
            Kernel::Attention => (shader!("attention.wgsl"), false, false),
            Kernel::AttentionCoop => (shader!("attention_coop.wgsl"), false, false),
            Kernel::AttnPrefillMerge => (shader!("attn_prefill_merge.wgsl"), false, false),
            Kernel::AttnDecode => (shader!("attn_decode.wgsl"), false, false),
            Kernel::AttnCombine => (shader!("attn_combine.wgsl"), false, false),
            Kernel::FfnAct => (shader!("ffn_act.wgsl"), false, false),
            Kernel::Argmax => (shader!("argmax.wgsl"), false, false),
            Kernel::Sample => (shader!("sample.wgsl"), false, false),
            Kernel::Mask => (shader!("mask.wgsl"), false, false),
            Kernel::Conv1d => (shader!("conv1d.wgsl"), false, false),
            Kernel::DeltaPrep => (shader!("delta_prep.wgsl"), false, false),
            Kernel::DeltaRule => (shader!("delta_rule.wgsl"), false, false),
            Kernel::GatedNorm => (shader!("gated_norm.wgsl"), false, false),
            Kernel::AttnGate => (shader!("attn_gate.wgsl"), false, false),
            Kernel::SubgroupLayout => (shader!("subgroup_layout.wgsl"), false, false),
        };
        let merge = matches!(self, Kernel::AttnDecode | Kernel::AttnCombine);
        let layout = weights || reduce || self == Kernel::MatMulI8;
        Source { body, layout, weights, reduce, merge }
    }

    /// Whether every index into the kernel's workgroup and local arrays derives from invocation
    /// ids, constants and counted loops alone, never from data or the step's token counts, so
    /// that naga's clamp on each of them guards nothing: the matrix-unit matmuls and prefill
    /// attention (H100, pp512 without the clamps: Llama-3.2-1B 32.0-32.2k -> 34.1-34.9k tok/s,
    /// Phi-3-mini 10.3-10.5k -> 11.1-11.2k; gate+up 5.61 -> 5.23 ms, down 3.48 -> 3.04).
    pub fn structural_indices(self) -> bool {
        matches!(self, Kernel::MatMulCoop | Kernel::MatMulWide | Kernel::AttentionCoop)
    }

    /// Binding slots in order of binding number (gaps allowed: `None`).
    fn slots(self) -> &'static [Option<Slot>] {
        use Slot::*;
        match self {
            Kernel::MatVec | Kernel::MatMul | Kernel::MatMulCoop => {
                &[Some(Read), Some(Read), Some(Read), Some(ReadWrite), Some(Read), Some(Uniform)]
            }
            Kernel::MatMulWide => {
                &[Some(Read), Some(Read), Some(Read), Some(ReadWrite), Some(Read), Some(Uniform), Some(ReadWrite)]
            }
            Kernel::MatMulSum => &[None, None, None, Some(ReadWrite), Some(Read), Some(Uniform), Some(Read)],
            Kernel::MatMulI8 => &[
                Some(Read),
                Some(Read),
                Some(Read),
                Some(ReadWrite),
                Some(Read),
                Some(Uniform),
                Some(Read),
                Some(ReadWrite),
                Some(ReadWrite),
            ],
            Kernel::QuantRows => &[Some(Read), Some(ReadWrite), Some(ReadWrite), None, None, Some(Uniform)],
            Kernel::QkvRope => &[
                Some(Read),
                Some(Read),
                Some(Read),
                Some(ReadWrite),
                Some(Read),
                Some(Uniform),
                Some(ReadWrite),
                Some(Read),
            ],
            Kernel::FfnSplit => {
                &[Some(Read), Some(Read), Some(ReadWrite), None, Some(Read), Some(Uniform), Some(Read), Some(Read)]
            }
            Kernel::Embed => &[Some(Read), Some(Read), Some(Read), Some(ReadWrite), None, Some(Uniform)],
            Kernel::RmsNorm => {
                &[Some(Read), Some(Read), Some(ReadWrite), Some(ReadWrite), None, Some(Uniform), Some(ReadWrite)]
            }
            Kernel::RopeKv => &[Some(ReadWrite), None, None, Some(ReadWrite), Some(Read), Some(Uniform), Some(Read)],
            Kernel::Attention => {
                &[Some(Read), Some(Read), Some(Read), Some(ReadWrite), Some(ReadWrite), Some(Uniform), Some(ReadWrite)]
            }
            Kernel::AttentionCoop => {
                &[Some(Read), Some(Read), Some(Read), Some(ReadWrite), Some(ReadWrite), Some(Uniform)]
            }
            Kernel::AttnPrefillMerge => &[Some(Read), None, None, Some(ReadWrite), None, Some(Uniform)],
            Kernel::AttnDecode => {
                &[Some(Read), Some(Read), Some(Read), Some(ReadWrite), Some(ReadWrite), Some(Uniform), Some(ReadWrite)]
            }
            Kernel::AttnCombine => &[Some(Read), None, None, Some(ReadWrite), None, Some(Uniform)],
            Kernel::FfnAct => {
                &[Some(Read), Some(ReadWrite), Some(ReadWrite), None, None, Some(Uniform), Some(ReadWrite)]
            }
            Kernel::ToF16 => &[Some(Read), Some(ReadWrite), None, None, None, Some(Uniform)],
            Kernel::Argmax => &[Some(Read), Some(ReadWrite), Some(ReadWrite), None, None, Some(Uniform)],
            Kernel::Mask => &[Some(ReadWrite), Some(Read), None, None, None, Some(Uniform)],
            Kernel::Conv1d => &[Some(Read), Some(Read), Some(ReadWrite), Some(ReadWrite), None, Some(Uniform)],
            Kernel::DeltaPrep => &[Some(ReadWrite), Some(Read), Some(ReadWrite), Some(Read), None, Some(Uniform)],
            Kernel::DeltaRule => &[Some(Read), Some(Read), Some(ReadWrite), None, Some(ReadWrite), Some(Uniform)],
            Kernel::GatedNorm => &[Some(Read), Some(ReadWrite), None, Some(Read), None, Some(Uniform)],
            Kernel::AttnGate => &[Some(Read), Some(ReadWrite), None, None, None, Some(Uniform)],
            Kernel::SubgroupLayout => &[Some(ReadWrite), None, None, None, None, Some(Uniform)],
            Kernel::Sample => &[
                Some(Read),
                Some(ReadWrite),
                Some(ReadWrite),
                Some(ReadWrite),
                Some(Uniform),
                Some(Uniform),
                Some(ReadWrite),
            ],
        }
    }
}

pub struct Pipeline {
    pub pipeline: wgpu::ComputePipeline,
    pub layout: Rc<wgpu::BindGroupLayout>,
}

/// Compiled pipelines. Single-threaded by design (the engine drives one device from one thread,
/// and on the web everything is one thread anyway).
pub struct Pipelines {
    /// Use the subgroup row reduction (adapter has subgroups exactly 32 wide).
    pub subgroups: bool,
    /// Decode matvecs of quantized weights take 8-bit activations and integer dot products.
    pub idot: bool,
    /// Decode attention merges its splits in its own last workgroup per head (attn_decode.wgsl
    /// FUSED), one dispatch a layer fewer. The device then has MEMORY_DECORATION_COHERENT, and
    /// storage buffers marked `/*COHERENT*/` in the WGSL get naga's `@coherent`.
    pub fused_attention: bool,
    /// The prefill matmul runs on cooperative matrices (matmul_coop.wgsl, not matmul.wgsl).
    pub matrix_units: bool,
    /// Prefill matmuls of quantized weights take 8-bit activations (matmul_i8.wgsl): on subgroup
    /// matrices in browsers (i8_smx.wgsl), with packed dot products natively (i8_dot.wgsl).
    pub i8_prefill: bool,
    /// matmul_i8.wgsl's product rows in workgroup memory (`ops::matmul::i8_scratch_row`).
    pub i8_scratch_row: u32,
    layouts: RefCell<HashMap<Kernel, (Rc<wgpu::BindGroupLayout>, wgpu::PipelineLayout)>>,
    modules: RefCell<HashMap<Kernel, wgpu::ShaderModule>>,
    cache: RefCell<HashMap<String, Rc<Pipeline>>>,
}

impl Pipelines {
    pub fn new(
        subgroups: bool,
        idot: bool,
        fused_attention: bool,
        matrix_units: bool,
        i8_prefill: bool,
        i8_scratch_row: u32,
    ) -> Self {
        Pipelines {
            subgroups,
            idot,
            fused_attention,
            matrix_units,
            i8_prefill,
            i8_scratch_row,
            layouts: Default::default(),
            modules: Default::default(),
            cache: Default::default(),
        }
    }

    /// The same kernel variants with empty caches (a sibling `Gpu`'s).
    pub fn fresh(&self) -> Self {
        Pipelines::new(
            self.subgroups,
            self.idot,
            self.fused_attention,
            self.matrix_units,
            self.i8_prefill,
            self.i8_scratch_row,
        )
    }

    pub fn count(&self) -> usize {
        self.cache.borrow().len()
    }

    fn layout(&self, device: &wgpu::Device, k: Kernel) -> (Rc<wgpu::BindGroupLayout>, wgpu::PipelineLayout) {
        if let Some((b, p)) = self.layouts.borrow().get(&k) {
            return (b.clone(), p.clone());
        }
        let entries: Vec<wgpu::BindGroupLayoutEntry> = k
            .slots()
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let ty = match (*s)? {
                    Slot::Read => wgpu::BufferBindingType::Storage { read_only: true },
                    Slot::ReadWrite => wgpu::BufferBindingType::Storage { read_only: false },
                    Slot::Uniform => wgpu::BufferBindingType::Uniform,
                };
                Some(wgpu::BindGroupLayoutEntry {
                    binding: i as u32,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: wgpu::BindingType::Buffer { ty, has_dynamic_offset: false, min_binding_size: None },
                    count: None,
                })
            })
            .collect();
        let bgl = Rc::new(device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some(&format!("{k:?}")),
            entries: &entries,
        }));
        let pl = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(&format!("{k:?}")),
            bind_group_layouts: &[Some(&bgl)],
            immediate_size: 0,
        });
        self.layouts.borrow_mut().insert(k, (bgl.clone(), pl.clone()));
        (bgl, pl)
    }

    /// The WGSL of kernel `k` as this device compiles it: the shared pieces it needs, then its body.
    pub fn wgsl(&self, k: Kernel) -> String {
        let src = k.source();
        // `enable` directives must come first, so the reduction prelude leads.
        let mut code = String::new();
        let coop = matches!(k, Kernel::MatMulCoop | Kernel::MatMulWide | Kernel::AttentionCoop);
        let f16 = coop || k == Kernel::ToF16;
        if coop {
            code.push_str(COOP_ENABLES);
        } else if f16 {
            code.push_str(F16_ENABLE);
        }
        // The block products of the 8-bit matmul; the matrix version opens with its `enable`s.
        if k == Kernel::MatMulI8 {
            let smx = self.i8_prefill && cfg!(target_arch = "wasm32");
            code.push_str(&if smx { I8_SMX } else { I8_DOT }.text());
            let ts = self.i8_scratch_row;
            // Half-subgroups read rows PAIR apart: PAIR * TS = 16 (mod 32) words, other banks.
            let pair = if ts % 32 == 16 { 1 } else { 2 };
            debug_assert!(ts >= 16 && pair * ts % 32 == 16, "no PAIR for a scratch row of {ts} words");
            code.push_str(&format!(
                "const TS: u32 = {ts}u;\nconst PAIR: u32 = {pair}u;\nconst TILE: u32 = {}u;\n",
                16 * ts
            ));
        }
        // The layout probe runs only on devices opened with subgroups.
        if k == Kernel::SubgroupLayout && cfg!(target_arch = "wasm32") {
            code.push_str("enable subgroups;\n");
        }
        if src.reduce {
            // Browsers want the directive; naga natively rejects it (reduce_sg.wgsl).
            if self.subgroups && cfg!(target_arch = "wasm32") {
                code.push_str("enable subgroups;\n");
            }
            code.push_str(&if self.subgroups { REDUCE_SG } else { REDUCE_WG }.text());
        }
        if src.layout {
            code.push_str(&LAYOUT.text());
        }
        if src.weights {
            code.push_str(&WEIGHTS.text());
        }
        if src.reduce {
            code.push_str(&ROWDOT.text());
        }
        if src.reduce || matches!(k, Kernel::FfnAct | Kernel::MatMulI8) {
            code.push_str(&GLU.text());
        }
        if src.merge {
            code.push_str(&ATTN_MERGE.text());
        }
        code.push_str(&STEP.text());
        if matches!(k, Kernel::MatMul | Kernel::MatMulCoop | Kernel::MatMulWide | Kernel::MatMulSum | Kernel::MatMulI8)
        {
            code.push_str(&MATMUL_OUT.text());
        }
        if matches!(k, Kernel::MatMul | Kernel::MatMulCoop | Kernel::MatMulWide) {
            code.push_str(&MATMUL_TILE.text());
        }
        if matches!(k, Kernel::MatMulCoop | Kernel::MatMulWide) {
            code.push_str(&MATMUL_F16.text());
        }
        if matches!(k, Kernel::QkvRope | Kernel::RopeKv) {
            code.push_str(&ROPE.text());
        }
        if matches!(k, Kernel::RmsNorm | Kernel::FfnAct) {
            code.push_str(&PACK_H2.text());
        }
        if matches!(k, Kernel::RmsNorm | Kernel::FfnAct | Kernel::QuantRows | Kernel::Attention | Kernel::MatMulI8) {
            code.push_str(&QUANT_BLOCK.text());
        }
        code.push_str(&src.body.text());
        if self.fused_attention {
            code = code.replace("/*COHERENT*/", "@coherent");
        }
        code
    }

    /// The pipeline for `k` with these override constants, compiled on first use.
    pub fn get(&self, device: &wgpu::Device, k: Kernel, constants: &[(&str, f64)]) -> Rc<Pipeline> {
        let key = format!("{k:?}{constants:?}");
        if let Some(p) = self.cache.borrow().get(&key) {
            return p.clone();
        }
        let (bgl, pl) = self.layout(device, k);
        let module = self
            .modules
            .borrow_mut()
            .entry(k)
            .or_insert_with(|| {
                let code = self.wgsl(k);
                let desc = wgpu::ShaderModuleDescriptor {
                    label: Some(&format!("{k:?}")),
                    source: wgpu::ShaderSource::Wgsl(code.into()),
                };
                // SAFETY: the only check turned off is naga's loop bounding, a counter it adds to
                // every loop so that a loop that never ends cannot be undefined behaviour. Every
                // loop in shaders/ is a counted `for` with a positive step and a bound below 2^31
                // (audited; keep it so), and those counters cost 4-9% of decode speed on the H100.
                // Natively, the kernels whose workgroup-array indices are all structural
                // (`Kernel::structural_indices`) are compiled without naga's index clamps; storage
                // buffers stay bounded by the driver's robust buffer access, which wgpu requests
                // where the Vulkan device has it and then leaves buffer indices unclamped anyway.
                // Every other kernel keeps its checks; browsers apply their own.
                let checks = wgpu::ShaderRuntimeChecks {
                    force_loop_bounding: false,
                    bounds_checks: !k.structural_indices(),
                    ..wgpu::ShaderRuntimeChecks::checked()
                };
                unsafe { device.create_shader_module_trusted(desc, checks) }
            })
            .clone();
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(&key),
            layout: Some(&pl),
            module: &module,
            entry_point: Some("main"),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants,
                zero_initialize_workgroup_memory: false,
            },
            cache: None,
        });
        let p = Rc::new(Pipeline { pipeline, layout: bgl });
        self.cache.borrow_mut().insert(key, p.clone());
        p
    }
}
