//! The GPU context: adapter and device selection with the adapter's own limits, buffers,
//! the pipeline cache, error capture and readback.

mod oneshot;
pub mod pipelines;

use crate::error::{Error, Result};
pub use pipelines::{Kernel, Pipeline, Pipelines};
use std::rc::Rc;
use std::sync::{Arc, Mutex};

/// What the engine learned about the adapter; reported by `inspect`, `bench` and the web API.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AdapterSummary {
    pub name: String,
    pub backend: String,
    pub device_type: String,
    pub driver: String,
    pub max_buffer_size: u64,
    pub max_storage_buffer_binding_size: u64,
    pub max_workgroup_storage_size: u32,
    pub shader_f16: bool,
    pub subgroups: bool,
    /// Quantized decode uses 8-bit activations with WGSL's packed integer dot products.
    pub integer_dot: bool,
    /// Decode attention merges its splits without a dispatch of its own.
    pub fused_attention: bool,
    /// Prefill matmuls run on cooperative matrices (matmul_coop.wgsl).
    pub matrix_units: bool,
    /// Prefill matmuls of quantized weights take 8-bit activations (matmul_i8.wgsl): on 8-bit
    /// subgroup matrices in browsers that offer them.
    pub i8_prefill: bool,
    pub timestamps: bool,
    pub timestamps_in_passes: bool,
}

/// A map request from `Gpu::start_map`, answered by wgpu's callback.
pub struct PendingMap(oneshot::Receiver<std::result::Result<(), wgpu::BufferAsyncError>>);

impl PendingMap {
    /// wgpu has answered the request (in a browser: its promise has settled). Natively the
    /// answer comes only from a `device.poll`, which `Gpu::finish_map` makes.
    pub fn is_answered(&self) -> bool {
        self.0.is_ready()
    }
}

/// A handle on a device. Clones share the device, its compiled pipelines and its error and loss
/// slots (in a browser, the engines of one page or worker: `Gpu::for_load`).
#[derive(Clone)]
pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub summary: AdapterSummary,
    pub limits: wgpu::Limits,
    pub pipelines: Rc<Pipelines>,
    /// First uncaptured device error (validation, out of memory), if any.
    error: Arc<Mutex<Option<String>>>,
    /// Why the device was lost (driver reset, GPU removed, the browser reclaimed it), once it is:
    /// every later call fails with `Error::DeviceLost`.
    lost: Arc<Mutex<Option<String>>>,
    /// This device among the process's (the package matches loss reports to engines by it).
    pub id: u32,
}

/// Device ids: unique per process.
static NEXT_ID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

/// In the browser, a lost device is also reported to the package at once, through
/// `globalThis.__ferrolmDeviceLost(id, message)` (pkg-template/core.js), so it can fail the call
/// in progress and tell the page; the callback may only capture `Send` values, hence the global.
#[cfg(target_arch = "wasm32")]
fn report_lost(id: u32, message: &str) {
    use wasm_bindgen::{JsCast, JsValue};
    if let Ok(f) = js_sys::Reflect::get(&js_sys::global(), &JsValue::from_str("__ferrolmDeviceLost")) {
        if let Some(f) = f.dyn_ref::<js_sys::Function>() {
            let _ = f.call2(&JsValue::NULL, &JsValue::from(id), &JsValue::from_str(message));
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn report_lost(_id: u32, _message: &str) {}

/// Whether the package will add `subgroups` to the device request, for 32-wide subgroups
/// (core.js sets `__ferrolmSubgroups32` when the adapter qualifies).
#[cfg(target_arch = "wasm32")]
fn web_subgroups32() -> bool {
    web_flag("__ferrolmSubgroups32")
}

/// A flag the package sets on the global object before it loads an engine (core.js).
#[cfg(target_arch = "wasm32")]
fn web_flag(name: &str) -> bool {
    js_sys::Reflect::get(&js_sys::global(), &name.into()).map(|v| v.is_truthy()).unwrap_or(false)
}

/// The least we need; checked up front so a weak adapter fails with a clear message.
const MIN_WORKGROUP_STORAGE: u32 = 16 * 1024;
const MIN_INVOCATIONS: u32 = 256;
/// Workgroup memory of the larger matrix-unit matmul (matmul_coop_wide.wgsl): two padded f16
/// tiles of W and two of A (10 KiB each) and an eighth of the f32 output tile (8 KiB). Prefill attention on
/// matrix units needs more and checks for itself (ops/attention.rs `ATTENTION_COOP_STORAGE`).
const COOP_WORKGROUP_STORAGE: u32 = 48 * 1024;

/// In a browser, the device the engines of this page or worker share (`Gpu::for_load`), with
/// whether `FERROLM_NO_SUBGROUP_MATRIX` was set when it was opened, and the loads under way on it.
#[cfg(target_arch = "wasm32")]
struct Shared {
    gpu: Gpu,
    no_subgroup_matrix: bool,
    loads: Rc<std::cell::Cell<u32>>,
}

#[cfg(target_arch = "wasm32")]
thread_local! {
    static SHARED: std::cell::RefCell<Option<Shared>> = const { std::cell::RefCell::new(None) };
}

/// A load's claim on its device: until `finish`, the device's errors (out of memory, validation,
/// the compiler's) are the load's, caught by error scopes, so that a load that fails leaves the
/// other engines on a shared device working.
pub struct LoadScope {
    scopes: Vec<wgpu::ErrorScopeGuard>,
    #[cfg(target_arch = "wasm32")]
    loads: Option<Rc<std::cell::Cell<u32>>>,
}

impl LoadScope {
    /// The first error the load's GPU work raised, as the device's error slot would report it.
    pub async fn finish(mut self) -> Result<()> {
        // Popped here, innermost first; `Drop` then finds none left.
        let mut first = None;
        // Scopes pop innermost first; the outermost caught the earliest kind pushed.
        while let Some(scope) = self.scopes.pop() {
            if let Some(e) = scope.pop().await {
                first = Some(e.to_string());
            }
        }
        first.map_or(Ok(()), |e| Err(Error::Gpu(e)))
    }
}

impl Drop for LoadScope {
    fn drop(&mut self) {
        // A load that failed early: its scopes go innermost first, as a device's stack of error
        // scopes must be popped (a Vec would drop them outermost first).
        while let Some(scope) = self.scopes.pop() {
            drop(scope);
        }
        #[cfg(target_arch = "wasm32")]
        if let Some(n) = &self.loads {
            n.set(n.get().saturating_sub(1));
        }
    }
}

impl Gpu {
    /// The device for an engine's load and the load's error scope. Natively a device of its own
    /// (`Gpu::new`). In a browser the page's or worker's device, shared with the engines it already
    /// runs, while that device is sound (not lost, no error) and no other load is under way on it:
    /// the engines then share compiled pipelines, which saves most of a load where pipelines
    /// compile slowly (SwiftShader: ~0.5-2 s each, ~30 a model), and one lost device fails them
    /// all, as losing the GPU does anyway.
    pub async fn for_load() -> Result<(Gpu, LoadScope)> {
        #[cfg(target_arch = "wasm32")]
        {
            let no_smx = web_flag("FERROLM_NO_SUBGROUP_MATRIX");
            let reuse = SHARED.with(|s| {
                s.borrow().as_ref().and_then(|sh| {
                    let idle = sh.loads.get() == 0 && sh.no_subgroup_matrix == no_smx;
                    (idle && sh.gpu.check().is_ok()).then(|| (sh.gpu.clone(), sh.loads.clone()))
                })
            });
            let (gpu, loads) = match reuse {
                Some(g) => g,
                None => {
                    let gpu = Gpu::new().await?;
                    let loads = Rc::new(std::cell::Cell::new(0));
                    let keep = SHARED.with(|s| {
                        let mut s = s.borrow_mut();
                        // Another load may have opened a device meanwhile: the first sound one stays.
                        let busy = s.as_ref().is_some_and(|sh| sh.gpu.check().is_ok() && sh.loads.get() > 0);
                        if !busy {
                            *s = Some(Shared { gpu: gpu.clone(), no_subgroup_matrix: no_smx, loads: loads.clone() });
                        }
                        !busy
                    });
                    (gpu, if keep { loads } else { Rc::new(std::cell::Cell::new(0)) })
                }
            };
            loads.set(loads.get() + 1);
            let scopes = gpu.push_load_scopes();
            Ok((gpu, LoadScope { scopes, loads: Some(loads) }))
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            let gpu = Gpu::new().await?;
            let scopes = gpu.push_load_scopes();
            Ok((gpu, LoadScope { scopes }))
        }
    }

    fn push_load_scopes(&self) -> Vec<wgpu::ErrorScopeGuard> {
        [wgpu::ErrorFilter::OutOfMemory, wgpu::ErrorFilter::Validation, wgpu::ErrorFilter::Internal]
            .into_iter()
            .map(|f| self.device.push_error_scope(f))
            .collect()
    }

    /// Destroys the device on purpose (the package's device-loss test), marking it lost at once so
    /// that no load takes it for a sound shared device before the browser reports the loss.
    pub fn destroy_for_testing(&self) {
        *self.lost.lock().unwrap_or_else(|p| p.into_inner()) = Some("destroyed by the test".into());
        self.device.destroy();
    }

    /// Pick an adapter (high performance first) and open a device with the adapter's limits.
    /// Natively `WGPU_BACKEND` (e.g. `vulkan`) and `WGPU_ADAPTER_NAME` narrow the choice.
    pub async fn new() -> Result<Gpu> {
        #[cfg(not(target_arch = "wasm32"))]
        let backends = wgpu::Backends::from_env().unwrap_or(wgpu::Backends::PRIMARY);
        #[cfg(target_arch = "wasm32")]
        let backends = wgpu::Backends::BROWSER_WEBGPU;
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = backends;
        let instance = wgpu::Instance::new(desc);
        #[cfg(not(target_arch = "wasm32"))]
        let adapter = match std::env::var("WGPU_ADAPTER_NAME") {
            Ok(want) => {
                let want = want.to_lowercase();
                let all = instance.enumerate_adapters(backends).await;
                let names: Vec<String> = all.iter().map(|a| a.get_info().name).collect();
                all.into_iter().find(|a| a.get_info().name.to_lowercase().contains(&want)).ok_or_else(|| {
                    Error::NoAdapter(format!("no adapter matches WGPU_ADAPTER_NAME={want:?}; found {names:?}"))
                })?
            }
            Err(_) => Self::request(&instance).await?,
        };
        #[cfg(target_arch = "wasm32")]
        let adapter = Self::request(&instance).await?;

        let info = adapter.get_info();
        // FERROLM_WEBGPU_LIMITS=1 asks for no more than every WebGPU adapter guarantees (16 KiB of
        // workgroup storage, 256 invocations, 128 MiB bindings): the browsers' budget, natively.
        let limits =
            if std::env::var("FERROLM_WEBGPU_LIMITS").is_ok() { wgpu::Limits::default() } else { adapter.limits() };
        let features = adapter.features();
        if limits.max_compute_workgroup_storage_size < MIN_WORKGROUP_STORAGE
            || limits.max_compute_invocations_per_workgroup < MIN_INVOCATIONS
        {
            return Err(Error::Limits(format!(
                "{} offers {} bytes of workgroup memory and {} invocations per workgroup; ferrolm needs {} and {}",
                info.name,
                limits.max_compute_workgroup_storage_size,
                limits.max_compute_invocations_per_workgroup,
                MIN_WORKGROUP_STORAGE,
                MIN_INVOCATIONS
            )));
        }
        // Subgroup reductions assume a subgroup is exactly one 32-thread row of a kernel.
        #[cfg(not(target_arch = "wasm32"))]
        let sg32 =
            features.contains(wgpu::Features::SUBGROUP) && info.subgroup_min_size == 32 && info.subgroup_max_size == 32;
        // wgpu's WebGPU backend neither reports nor requests `subgroups`: the package asks for
        // it itself where the adapter's subgroups are exactly 32 wide (core.js `withSubgroups`),
        // and says so in a global.
        #[cfg(target_arch = "wasm32")]
        let sg32 = web_subgroups32();
        let sg32 = sg32 && std::env::var("FERROLM_NO_SUBGROUPS").is_err();
        // Integer activations for quantized decode matvecs need WGSL's 4x8-bit dot products.
        // Measured faster natively and in Chromium on the H100 (GPU time of a 1B decode step
        // 1.05 -> 0.94 ms, SmolLM2 1.00 -> 0.95; BENCHMARKS.md session 9), so they run wherever
        // the WGSL language feature is offered. FERROLM_NO_IDOT=1 forces the f32 path natively.
        let idot = instance.wgsl_language_features().contains(wgpu::WgslLanguageFeatures::Packed4x8IntegerDotProduct)
            && std::env::var("FERROLM_NO_IDOT").is_err();
        // Decode attention's splits merge themselves (attn_decode.wgsl FUSED) where one split's
        // partial is sure to be visible to the split that merges: on Vulkan, where naga emits
        // storageBarrier() as a device-scope acquire/release barrier and `part` can be declared
        // Coherent (wgpu's MEMORY_DECORATION_COHERENT), as GLSL's memory model requires for
        // other workgroups to see the writes. WGSL promises neither, so browsers and the other
        // backends keep the merge dispatch. FERROLM_NO_FUSED_ATTENTION=1 keeps it on Vulkan too.
        let fused_attention = info.backend == wgpu::Backend::Vulkan
            && cfg!(not(target_arch = "wasm32"))
            && features.contains(wgpu::Features::MEMORY_DECORATION_COHERENT)
            && std::env::var("FERROLM_NO_FUSED_ATTENTION").is_err();
        // Prefill matmuls on the matrix units (matmul_coop.wgsl): 16x16x16 f16 x f16 -> f32
        // cooperative matrices, each owned by one 32-wide subgroup, and 48 KiB of workgroup
        // memory. wgpu's cooperative matrices are experimental and native only (Vulkan's
        // VK_KHR_cooperative_matrix, Metal's simdgroup matrices). FERROLM_NO_COOP=1 keeps the f32
        // matmul.
        let matrix_units = cfg!(not(target_arch = "wasm32"))
            && features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX | wgpu::Features::SHADER_F16)
            && info.subgroup_min_size == 32
            && info.subgroup_max_size == 32
            && limits.max_compute_workgroup_storage_size >= COOP_WORKGROUP_STORAGE
            && adapter.cooperative_matrix_properties().iter().any(|p| {
                (p.m_size, p.n_size, p.k_size) == (16, 16, 16)
                    && p.ab_type == wgpu::CooperativeScalarType::F16
                    && p.cr_type == wgpu::CooperativeScalarType::F32
            })
            && std::env::var("FERROLM_NO_COOP").is_err();
        // Prefill matmuls of quantized weights with 8-bit activations (matmul_i8.wgsl): in
        // browsers on Chromium's `chromium-experimental-subgroup-matrix` with i8 x i8 -> i32
        // 16x16x32, which it offers without f16 (NVIDIA on Vulkan). wgpu's WebGPU backend knows no
        // such feature: the package asks for it with `subgroups` (core.js `withSubgroups`) and
        // sets the global. The activations go to 8 bits with pack4xI8, hence the integer dot
        // products too. Natively only with FERROLM_I8_PREFILL=1, on packed dot products (slower
        // than the f32 kernel; for checking the browser path's accuracy on any adapter).
        #[cfg(target_arch = "wasm32")]
        let i8_prefill = sg32 && idot && web_flag("__ferrolmSubgroupMatrixI8");
        #[cfg(not(target_arch = "wasm32"))]
        let i8_prefill = idot && std::env::var("FERROLM_I8_PREFILL").is_ok_and(|v| v != "0");
        // Timestamps between dispatches (native only) let `bench --profile` time each kernel.
        let mut wanted = features
            & (wgpu::Features::TIMESTAMP_QUERY
                | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS
                | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES);
        // Natively subgroups whenever offered (unless FERROLM_NO_SUBGROUPS): the layout probe
        // below (and its test) needs them even where the kernels keep the portable reductions.
        if features.contains(wgpu::Features::SUBGROUP)
            && cfg!(not(target_arch = "wasm32"))
            && std::env::var("FERROLM_NO_SUBGROUPS").is_err()
        {
            wanted |= wgpu::Features::SUBGROUP;
        }
        if fused_attention {
            wanted |= wgpu::Features::MEMORY_DECORATION_COHERENT;
        }
        if matrix_units {
            wanted |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX | wgpu::Features::SHADER_F16;
        }
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("ferrolm"),
                required_features: wanted,
                required_limits: limits.clone(),
                // SAFETY: the only experimental feature asked for is cooperative matrices, used by
                // matmul_coop.wgsl alone, which the kernel tests check against the CPU reference.
                experimental_features: if matrix_units {
                    unsafe { wgpu::ExperimentalFeatures::enabled() }
                } else {
                    wgpu::ExperimentalFeatures::disabled()
                },
                memory_hints: wgpu::MemoryHints::Performance,
                trace: wgpu::Trace::Off,
            })
            .await
            .map_err(|e| Error::NoAdapter(format!("{}: cannot open a device: {e}", info.name)))?;

        let error = Arc::new(Mutex::new(None::<String>));
        let slot = error.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            let mut s = slot.lock().unwrap_or_else(|p| p.into_inner());
            if s.is_none() {
                *s = Some(e.to_string());
            }
        }));
        let lost = Arc::new(Mutex::new(None::<String>));
        let slot = lost.clone();
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        device.set_device_lost_callback(move |reason, msg| {
            let why = if msg.is_empty() { format!("{reason:?}") } else { format!("{reason:?}: {msg}") };
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.clone());
            report_lost(id, &why);
        });

        let summary = AdapterSummary {
            name: info.name.clone(),
            backend: format!("{:?}", info.backend),
            device_type: format!("{:?}", info.device_type),
            driver: format!("{} {}", info.driver, info.driver_info).trim().to_string(),
            max_buffer_size: limits.max_buffer_size,
            max_storage_buffer_binding_size: limits.max_storage_buffer_binding_size as u64,
            max_workgroup_storage_size: limits.max_compute_workgroup_storage_size,
            shader_f16: features.contains(wgpu::Features::SHADER_F16),
            subgroups: sg32,
            integer_dot: idot,
            fused_attention,
            matrix_units,
            i8_prefill,
            timestamps: wanted.contains(wgpu::Features::TIMESTAMP_QUERY),
            timestamps_in_passes: wanted.contains(wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES),
        };
        let scratch_row = crate::ops::matmul::i8_scratch_row(limits.max_compute_workgroup_storage_size as usize);
        let pipelines = Rc::new(Pipelines::new(sg32, idot, fused_attention, matrix_units, i8_prefill, scratch_row));
        let mut gpu = Gpu { device, queue, summary, limits, pipelines, error, lost, id };
        // The subgroup kernels (reductions, 8-bit and f16 matrices) take lid / 32 as a subgroup
        // and lid % 32 as its lane; where the adapter lays subgroups out otherwise (or the probe
        // cannot run), the portable kernels compute the same results.
        let probe = if cfg!(target_arch = "wasm32") { sg32 } else { wanted.contains(wgpu::Features::SUBGROUP) };
        if (sg32 || matrix_units) && probe {
            let layout = gpu.subgroup_layout().await;
            if !matches!(layout, Ok(Some(32))) {
                log::warn!(
                    "subgroups are not 32 invocations in lane order here ({layout:?}): the portable kernels run"
                );
                // Natively the 8-bit prefill takes packed dot products, no subgroups.
                let i8 = i8_prefill && cfg!(not(target_arch = "wasm32"));
                gpu.pipelines = Rc::new(Pipelines::new(false, idot, fused_attention, false, i8, scratch_row));
                gpu.summary.subgroups = false;
                gpu.summary.matrix_units = false;
                gpu.summary.i8_prefill = i8;
            }
        }
        Ok(gpu)
    }

    /// The subgroup width where every invocation of a 256-wide workgroup sits at lane
    /// lid % width of the subgroup of invocations lid - lid % width.., in order
    /// (subgroup_layout.wgsl); `None` where some invocation does not. Needs a device with
    /// subgroups. Its errors (a browser that rejects the probe's WGSL: a validation error, or
    /// an internal one from the driver's compiler) are its own: error scopes keep them from the
    /// device's error slot, which would fail every later call.
    pub async fn subgroup_layout(&self) -> Result<Option<u32>> {
        let out = self.buffer("subgroup layout", 1024)?;
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let internal = self.device.push_error_scope(wgpu::ErrorFilter::Internal);
        let ran = crate::ops::run_once(self, crate::ops::Caps::of(self), [1, 0, 0], |r| {
            r.push("subgroup layout", Kernel::SubgroupLayout, &[], &[(0, &out)], crate::ops::Grid::Fixed(1))
        });
        let internal = internal.pop();
        let validation = validation.pop();
        if let Some(e) = internal.await.or(validation.await) {
            return Err(Error::Gpu(format!("the subgroup layout probe: {e}")));
        }
        ran?;
        let words: Vec<u32> = bytemuck::pod_collect_to_vec(&self.read_buffer(&out, 1024).await?);
        self.check()?;
        Ok(Some(words[0]).filter(|&w| w > 0 && words.iter().all(|&x| x == w)))
    }

    async fn request(instance: &wgpu::Instance) -> Result<wgpu::Adapter> {
        instance
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                force_fallback_adapter: false,
                compatible_surface: None,
                apply_limit_buckets: false,
            })
            .await
            .map_err(|e| {
                Error::NoAdapter(format!(
                    "{e} (is a Vulkan driver installed? for CPU-only machines: mesa-vulkan-drivers)"
                ))
            })
    }

    /// A second handle on the same device with its own pipeline cache (the same kernel variants):
    /// for a model of its own beside an engine's (`diagnose`).
    pub fn sibling(&self) -> Gpu {
        Gpu {
            device: self.device.clone(),
            queue: self.queue.clone(),
            summary: self.summary.clone(),
            limits: self.limits.clone(),
            pipelines: Rc::new(self.pipelines.fresh()),
            error: self.error.clone(),
            lost: self.lost.clone(),
            id: self.id,
        }
    }

    /// Fail with the device's loss, or else the first device error recorded since it was made.
    pub fn check(&self) -> Result<()> {
        if let Some(why) = self.lost.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            return Err(Error::DeviceLost(why));
        }
        match self.error.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            Some(e) => Err(Error::Gpu(e)),
            None => Ok(()),
        }
    }

    /// A storage buffer of `size` bytes (rounded up to 16 so vec4 views are whole), zeroed.
    pub fn buffer(&self, label: &str, size: u64) -> Result<wgpu::Buffer> {
        let size = size.max(16).div_ceil(16) * 16;
        if size > self.limits.max_buffer_size {
            return Err(Error::Limits(format!(
                "buffer {label:?} needs {size} bytes; the adapter allows {} per buffer",
                self.limits.max_buffer_size
            )));
        }
        Ok(self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        }))
    }

    /// A storage buffer holding `data` (padded with zeros to a multiple of 16 bytes).
    pub fn buffer_init(&self, label: &str, data: &[u8]) -> Result<wgpu::Buffer> {
        let buf = self.buffer(label, data.len() as u64)?;
        let whole = data.len() / 4 * 4;
        if whole > 0 {
            self.queue.write_buffer(&buf, 0, &data[..whole]);
        }
        if whole < data.len() {
            let mut tail = [0u8; 4];
            tail[..data.len() - whole].copy_from_slice(&data[whole..]);
            self.queue.write_buffer(&buf, whole as u64, &tail);
        }
        Ok(buf)
    }

    pub fn uniform(&self, label: &str, size: u64) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    pub fn readback_buffer(&self, label: &str, size: u64) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: size.div_ceil(4) * 4,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    /// Wait for `buf` (a MAP_READ buffer the caller already copied into) and return its bytes.
    pub async fn read_mapped(&self, buf: &wgpu::Buffer, size: u64) -> Result<Vec<u8>> {
        self.read_mapped_after(buf, size, None).await
    }

    /// As `read_mapped`, waiting natively only for submission `after` (later submissions keep
    /// the GPU busy meanwhile).
    pub async fn read_mapped_after(
        &self,
        buf: &wgpu::Buffer,
        size: u64,
        after: Option<wgpu::SubmissionIndex>,
    ) -> Result<Vec<u8>> {
        let map = self.start_map(buf, size);
        self.finish_map(buf, size, map, after).await
    }

    /// Ask for `buf`'s first `size` bytes to be mapped once the work already submitted is done;
    /// `finish_map` waits for it. Asking early matters in browsers: the request travels to the
    /// GPU process behind the commands sent before it, and is answered only after they are
    /// processed.
    pub fn start_map(&self, buf: &wgpu::Buffer, size: u64) -> PendingMap {
        let (tx, rx) = oneshot::channel();
        buf.map_async(wgpu::MapMode::Read, ..size, move |r| tx.send(r));
        PendingMap(rx)
    }

    /// Wait for a `start_map` of `buf` (natively only for submission `after`), copy the bytes
    /// out and unmap it. On every path `buf` is left unmapped (a failed request leaves it so).
    pub async fn finish_map(
        &self,
        buf: &wgpu::Buffer,
        size: u64,
        map: PendingMap,
        after: Option<wgpu::SubmissionIndex>,
    ) -> Result<Vec<u8>> {
        #[cfg(not(target_arch = "wasm32"))]
        if let Err(e) = self.device.poll(wgpu::PollType::Wait { submission_index: after, timeout: None }) {
            // The request is still pending: cancel it. A destroyed or lost device reports its
            // loss in the next maintenance pass.
            buf.unmap();
            let _ = self.device.poll(wgpu::PollType::Poll);
            self.check()?;
            return Err(Error::Gpu(format!("waiting for the GPU: {e}")));
        }
        #[cfg(target_arch = "wasm32")]
        let _ = after;
        match map.0.await {
            Some(Ok(())) => {}
            Some(Err(e)) => {
                self.check()?;
                return Err(Error::Gpu(format!("reading back results: {e}")));
            }
            None => return Err(Error::Gpu("reading back results: the map request was dropped".into())),
        }
        let out = buf.get_mapped_range(..size).map(|view| view.to_vec());
        buf.unmap();
        self.check()?;
        out.map_err(|e| Error::Gpu(format!("reading back results: {e}")))
    }

    /// Copy `size` bytes of a storage buffer to the CPU (tests and debugging; not the hot path).
    pub async fn read_buffer(&self, src: &wgpu::Buffer, size: u64) -> Result<Vec<u8>> {
        let staging = self.readback_buffer("readback", size);
        let mut enc = self.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(src, 0, &staging, 0, size.div_ceil(4) * 4);
        self.queue.submit([enc.finish()]);
        let mut v = self.read_mapped(&staging, size.div_ceil(4) * 4).await?;
        v.truncate(size as usize);
        Ok(v)
    }

    pub async fn read_f32(&self, src: &wgpu::Buffer, n: usize) -> Result<Vec<f32>> {
        let bytes = self.read_buffer(src, n as u64 * 4).await?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }
}

/// Block on a future natively (the CLI, tests and benches are synchronous).
#[cfg(not(target_arch = "wasm32"))]
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    pollster::block_on(f)
}
