//! ferrolm: LLM inference on WebGPU through wgpu, with hand-written WGSL kernels.
//!
//! The same crate runs natively (wgpu on Vulkan/Metal/DX12) for the CLI, tests and benchmarks, and
//! in the browser (wgpu's WebGPU backend) through wasm-bindgen.

pub mod error;
pub mod weights;
pub mod gpu;
pub mod model;
pub mod tokenizer;
pub mod chat_template;
pub mod sampler;
pub mod engine;
pub mod bench;
pub mod synth;

pub use error::{Error, Result};
#[cfg(target_arch = "wasm32")]
pub mod web;
