//! TEMPORARY stub (the real template engine lands from the `tok` branch).
use crate::error::Result;
use crate::weights::gguf::GgufFile;
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct ChatMessage { pub role: String, pub content: String }
pub struct ChatTemplate;
impl ChatTemplate {
    pub fn from_gguf(_g: &GgufFile) -> Result<Option<Self>> { Ok(None) }
    pub fn chatml() -> Result<Self> { Ok(ChatTemplate) }
    pub fn render(&self, _m: &[ChatMessage], _agp: bool) -> Result<String> { unimplemented!() }
}
