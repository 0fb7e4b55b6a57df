use ferrolm::chat_template::{ChatMessage, ChatTemplate};
#[test]
fn one() {
    let src = std::env::var("TPL").unwrap();
    let t0 = std::time::Instant::now();
    let r = ChatTemplate::new(&src, "<s>", "</s>").and_then(|t| t.render(&[ChatMessage::new("user", "hi")], true));
    eprintln!("RESULT {:?} in {:?}", r.map(|s| s.len()), t0.elapsed());
}
