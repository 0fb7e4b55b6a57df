//! ferrolm: LLM inference on WebGPU through wgpu, with hand-written WGSL kernels.
//!
//! The same crate runs natively (wgpu on Vulkan/Metal/DX12) for the CLI, tests and benchmarks, and
//! in the browser (wgpu's WebGPU backend) through wasm-bindgen.

pub mod base64;
pub mod bench;
pub mod chat;
pub mod chat_limits;
pub mod chat_template;
pub mod constrain;
pub mod diagnose;
pub mod embed;
pub mod engine;
pub mod error;
pub mod gbnf;
pub mod generation;
pub mod gpu;
pub mod model;
pub mod ops;
pub mod runtime;
pub mod sampler;
#[cfg(feature = "tools")]
pub mod synth;
pub mod tokenizer;
pub mod warnings;
pub mod weights;

pub use error::{Error, Result};
#[cfg(target_arch = "wasm32")]
pub mod web;
