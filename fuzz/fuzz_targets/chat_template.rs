//! Chat template source (and a message text after a NUL) rendered like a chat: Ok or a template
//! error, never a panic, and in bounded time and memory (run with -timeout and -rss_limit_mb).
#![no_main]

use ferrolm::chat_template::{ChatMessage, ChatTemplate};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (source, content) = text.split_once('\0').unwrap_or((text, "Hello there"));
    let Ok(t) = ChatTemplate::new(source, "<s>", "</s>") else { return };
    let messages = [
        ChatMessage::new("system", "Be brief."),
        ChatMessage::new("user", content),
        ChatMessage::new("assistant", "Hi."),
        ChatMessage::new("user", content),
    ];
    let _ = t.render(&messages, true).map_err(|e| e.to_string());
    let json = serde_json::json!([{"role": "user", "content": content},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "a", "type": "function",
            "function": {"name": "f", "arguments": {"x": [1, 2.5, null]}}}]},
        {"role": "tool", "tool_call_id": "a", "content": content}]);
    let tools = serde_json::json!([{"type": "function", "function": {"name": "f",
        "description": content, "parameters": {"type": "object", "properties": {"x": {"type": "array"}}}}}]);
    let _ = t.render_json(&json, Some(&tools), true).map_err(|e| e.to_string());
});
