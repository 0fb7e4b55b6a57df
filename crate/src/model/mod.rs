//! Model description (config), weights on the GPU, and the forward pass.

pub mod bounds;
pub mod config;
pub mod family;
pub mod forward;
pub mod hf;
pub mod hf_config;
pub mod load;
pub mod mlc;
pub mod streamed;
pub mod weights;

pub use config::ModelConfig;
