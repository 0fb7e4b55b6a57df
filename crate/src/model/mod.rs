//! Model description (config), weights on the GPU, and the forward pass.

pub mod config;
pub mod forward;
pub mod weights;
pub mod hf;
pub mod hf_config;

pub use config::ModelConfig;
