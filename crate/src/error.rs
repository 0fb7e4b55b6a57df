//! One error type for the whole crate. Messages name the file region, tensor or option at fault so
//! that a user can act on them without a debugger.

use crate::weights::gguf::GgufError;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot {op} {path}: {source}")]
    Io {
        /// "read" or "write".
        op: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Safetensors(#[from] crate::weights::safetensors::SafetensorsError),
    #[error(transparent)]
    Mlc(#[from] crate::model::mlc::MlcError),
    #[error("quantized data: {0}")]
    Quant(String),
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("chat template: {0}")]
    Template(String),
    #[error("model: {0}")]
    Model(String),
    #[error("unsupported model: {0}")]
    Unsupported(String),
    #[error("no usable GPU adapter: {0}")]
    NoAdapter(String),
    #[error("GPU: {0}")]
    Gpu(String),
    #[error("the GPU device was lost ({0}); create a new engine to continue")]
    DeviceLost(String),
    #[error("the GPU adapter's limits are too small: {0}")]
    Limits(String),
    #[error("invalid option: {0}")]
    InvalidOption(String),
    #[error("{}", overflow_text(*tokens, *max_new, *context))]
    ContextOverflow { tokens: usize, max_new: usize, context: usize },
}

/// A generation's prompt and tokens to come, or an input run alone (embeddings, a bench fill).
fn overflow_text(tokens: usize, max_new: usize, context: usize) -> String {
    if max_new == 0 {
        format!("input too long: {tokens} tokens exceed the context length {context}")
    } else {
        format!("prompt too long: {tokens} tokens plus {max_new} to generate exceed the context length {context}")
    }
}

impl Error {
    pub fn io(path: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { op: "read", path: path.into(), source }
    }

    /// A failed write (an output file, stdout).
    pub fn write(path: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { op: "write", path: path.into(), source }
    }
}

impl Error {
    /// A stable name for the kind of error, for programs (the JS API sets it as `error.name`).
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Io { .. } => "IoError",
            Error::Gguf(_) | Error::Safetensors(_) | Error::Mlc(_) => "ModelFormatError",
            Error::Quant(_) => "ModelFormatError",
            Error::Tokenizer(_) => "TokenizerError",
            Error::Template(_) => "TemplateError",
            Error::Model(_) => "ModelFormatError",
            Error::Unsupported(_) => "UnsupportedModelError",
            Error::NoAdapter(_) => "NoAdapterError",
            Error::Gpu(_) => "GpuError",
            Error::DeviceLost(_) => "DeviceLostError",
            Error::Limits(_) => "GpuLimitsError",
            Error::InvalidOption(_) => "InvalidOptionError",
            Error::ContextOverflow { .. } => "ContextOverflowError",
        }
    }
}
