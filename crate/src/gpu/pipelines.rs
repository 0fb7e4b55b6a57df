//! One WGSL file per kernel role (shaders/), embedded at build time, specialised with WGSL
//! `override` constants, and cached by (kernel, constants) so each variant compiles once.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

const STEP: &str = include_str!("../../../shaders/step.wgsl");
const LAYOUT: &str = include_str!("../../../shaders/layout.wgsl");
const WEIGHTS: &str = include_str!("../../../shaders/weights.wgsl");
const REDUCE_SG: &str = include_str!("../../../shaders/reduce_sg.wgsl");
const REDUCE_WG: &str = include_str!("../../../shaders/reduce_wg.wgsl");
const ROWDOT: &str = include_str!("../../../shaders/rowdot.wgsl");
const ATTN_MERGE: &str = include_str!("../../../shaders/attn_merge.wgsl");
const MATMUL_OUT: &str = include_str!("../../../shaders/matmul_out.wgsl");
const MATMUL_TILE: &str = include_str!("../../../shaders/matmul_tile.wgsl");
const MATMUL_F16: &str = include_str!("../../../shaders/matmul_f16.wgsl");
const ROPE: &str = include_str!("../../../shaders/rope.wgsl");
const PACK_H2: &str = include_str!("../../../shaders/pack_h2.wgsl");
const I8_SMX: &str = include_str!("../../../shaders/i8_smx.wgsl");
const I8_DOT: &str = include_str!("../../../shaders/i8_dot.wgsl");
/// `enable` directives of the matrix-unit kernels and of to_f16.wgsl; they must open the
/// assembled source.
const COOP_ENABLES: &str = "enable f16;\nenable wgpu_cooperative_matrix;\n";
const F16_ENABLE: &str = "enable f16;\n";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    MatVec,
    QkvRope,
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
}

impl Kernel {
    pub const ALL: [Kernel; 25] = [
        Kernel::MatVec,
        Kernel::QkvRope,
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
    body: &'static str,
    layout: bool,
    weights: bool,
    reduce: bool,
    merge: bool,
}

impl Kernel {
    fn source(self) -> Source {
        let (body, weights, reduce) = match self {
            Kernel::MatVec => (include_str!("../../../shaders/matvec.wgsl"), false, true),
            Kernel::QkvRope => (include_str!("../../../shaders/qkv_rope.wgsl"), false, true),
            Kernel::MatMul => (include_str!("../../../shaders/matmul.wgsl"), true, false),
            Kernel::MatMulCoop => (include_str!("../../../shaders/matmul_coop.wgsl"), true, false),
            Kernel::MatMulWide => (include_str!("../../../shaders/matmul_coop_wide.wgsl"), true, false),
            Kernel::MatMulSum => (include_str!("../../../shaders/matmul_sum.wgsl"), false, false),
            Kernel::MatMulI8 => (include_str!("../../../shaders/matmul_i8.wgsl"), false, false),
            Kernel::QuantRows => (include_str!("../../../shaders/quant_rows.wgsl"), false, false),
            Kernel::ToF16 => (include_str!("../../../shaders/to_f16.wgsl"), false, false),
            Kernel::Embed => (include_str!("../../../shaders/embed.wgsl"), true, false),
            Kernel::RmsNorm => (include_str!("../../../shaders/rmsnorm.wgsl"), false, false),
            Kernel::RopeKv => (include_str!("../../../shaders/rope_kv.wgsl"), false, false),
            Kernel::Attention => (include_str!("../../../shaders/attention.wgsl"), false, false),
            Kernel::AttentionCoop => (include_str!("../../../shaders/attention_coop.wgsl"), false, false),
            Kernel::AttnDecode => (include_str!("../../../shaders/attn_decode.wgsl"), false, false),
            Kernel::AttnCombine => (include_str!("../../../shaders/attn_combine.wgsl"), false, false),
            Kernel::FfnAct => (include_str!("../../../shaders/ffn_act.wgsl"), false, false),
            Kernel::Argmax => (include_str!("../../../shaders/argmax.wgsl"), false, false),
            Kernel::Sample => (include_str!("../../../shaders/sample.wgsl"), false, false),
            Kernel::Mask => (include_str!("../../../shaders/mask.wgsl"), false, false),
            Kernel::Conv1d => (include_str!("../../../shaders/conv1d.wgsl"), false, false),
            Kernel::DeltaPrep => (include_str!("../../../shaders/delta_prep.wgsl"), false, false),
            Kernel::DeltaRule => (include_str!("../../../shaders/delta_rule.wgsl"), false, false),
            Kernel::GatedNorm => (include_str!("../../../shaders/gated_norm.wgsl"), false, false),
            Kernel::AttnGate => (include_str!("../../../shaders/attn_gate.wgsl"), false, false),
        };
        let merge = matches!(self, Kernel::AttnDecode | Kernel::AttnCombine);
        let layout = weights || reduce || self == Kernel::MatMulI8;
        Source { body, layout, weights, reduce, merge }
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
            Kernel::MatMulI8 => {
                &[Some(Read), Some(Read), Some(Read), Some(ReadWrite), Some(Read), Some(Uniform), Some(Read)]
            }
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
            Kernel::Embed => &[Some(Read), Some(Read), Some(Read), Some(ReadWrite), None, Some(Uniform)],
            Kernel::RmsNorm => &[Some(Read), Some(Read), Some(ReadWrite), Some(ReadWrite), None, Some(Uniform)],
            Kernel::RopeKv => &[Some(ReadWrite), None, None, Some(ReadWrite), Some(Read), Some(Uniform), Some(Read)],
            Kernel::Attention | Kernel::AttentionCoop => {
                &[Some(Read), Some(Read), Some(Read), Some(ReadWrite), None, Some(Uniform)]
            }
            Kernel::AttnDecode => {
                &[Some(Read), Some(Read), Some(Read), Some(ReadWrite), Some(ReadWrite), Some(Uniform), Some(ReadWrite)]
            }
            Kernel::AttnCombine => &[Some(Read), None, None, Some(ReadWrite), None, Some(Uniform)],
            Kernel::FfnAct => &[Some(Read), Some(ReadWrite), Some(ReadWrite), None, None, Some(Uniform)],
            Kernel::ToF16 => &[Some(Read), Some(ReadWrite), None, None, None, Some(Uniform)],
            Kernel::Argmax => &[Some(Read), Some(ReadWrite), Some(ReadWrite), None, None, Some(Uniform)],
            Kernel::Mask => &[Some(ReadWrite), Some(Read), None, None, None, Some(Uniform)],
            Kernel::Conv1d => &[Some(Read), Some(Read), Some(ReadWrite), Some(ReadWrite), None, Some(Uniform)],
            Kernel::DeltaPrep => &[Some(ReadWrite), Some(Read), Some(ReadWrite), Some(Read), None, Some(Uniform)],
            Kernel::DeltaRule => &[Some(Read), Some(Read), Some(ReadWrite), None, Some(ReadWrite), Some(Uniform)],
            Kernel::GatedNorm => &[Some(Read), Some(ReadWrite), None, Some(Read), None, Some(Uniform)],
            Kernel::AttnGate => &[Some(Read), Some(ReadWrite), None, None, None, Some(Uniform)],
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
    layouts: RefCell<HashMap<Kernel, (Rc<wgpu::BindGroupLayout>, wgpu::PipelineLayout)>>,
    modules: RefCell<HashMap<Kernel, wgpu::ShaderModule>>,
    cache: RefCell<HashMap<String, Rc<Pipeline>>>,
}

impl Pipelines {
    pub fn new(subgroups: bool, idot: bool, fused_attention: bool, matrix_units: bool, i8_prefill: bool) -> Self {
        Pipelines {
            subgroups,
            idot,
            fused_attention,
            matrix_units,
            i8_prefill,
            layouts: Default::default(),
            modules: Default::default(),
            cache: Default::default(),
        }
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
            code.push_str(if smx { I8_SMX } else { I8_DOT });
        }
        if src.reduce {
            // Browsers want the directive; naga natively rejects it (reduce_sg.wgsl).
            if self.subgroups && cfg!(target_arch = "wasm32") {
                code.push_str("enable subgroups;\n");
            }
            code.push_str(if self.subgroups { REDUCE_SG } else { REDUCE_WG });
        }
        if src.layout {
            code.push_str(LAYOUT);
        }
        if src.weights {
            code.push_str(WEIGHTS);
        }
        if src.reduce {
            code.push_str(ROWDOT);
        }
        if src.merge {
            code.push_str(ATTN_MERGE);
        }
        code.push_str(STEP);
        if matches!(k, Kernel::MatMul | Kernel::MatMulCoop | Kernel::MatMulWide | Kernel::MatMulSum | Kernel::MatMulI8)
        {
            code.push_str(MATMUL_OUT);
        }
        if matches!(k, Kernel::MatMul | Kernel::MatMulCoop | Kernel::MatMulWide) {
            code.push_str(MATMUL_TILE);
        }
        if matches!(k, Kernel::MatMulCoop | Kernel::MatMulWide) {
            code.push_str(MATMUL_F16);
        }
        if matches!(k, Kernel::QkvRope | Kernel::RopeKv) {
            code.push_str(ROPE);
        }
        if matches!(k, Kernel::RmsNorm | Kernel::FfnAct) {
            code.push_str(PACK_H2);
        }
        code.push_str(src.body);
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
                // Bounds checks and integer-division checks stay on; browsers apply their own.
                let checks =
                    wgpu::ShaderRuntimeChecks { force_loop_bounding: false, ..wgpu::ShaderRuntimeChecks::checked() };
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
