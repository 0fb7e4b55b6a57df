//! Reading model files: byte sources, GGUF, quantized block formats and their GPU packing.

pub mod source;
pub mod gguf;
pub mod quant;
pub mod kquants;
pub mod pack;
pub mod safetensors;

pub use source::{ByteSource, FileSource, MemSource};
