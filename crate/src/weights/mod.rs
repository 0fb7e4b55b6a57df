//! Reading model files: byte sources, GGUF, quantized block formats and their GPU packing.

pub mod codebook;
pub mod gguf;
#[cfg(feature = "tools")]
pub mod gguf_write;
pub mod kquants;
pub mod pack;
pub mod quant;
pub mod reshape;
pub mod safetensors;
pub mod source;

pub use gguf::read_gguf_header;
pub use source::{AsyncSource, ByteSource, FileSource, MemSource};
