//! A chat with tools, earlier calls and their results, rendered by Qwen2.5's own template
//! (from the GGUF) exactly as Hugging Face transformers renders it (jinja2, recorded by
//! scripts/reference/chat_template_tools.py), and the SmolLM2 template, which knows no tools,
//! given the tools and calls as text.

mod common;

use hanzo_ml::quantized::gguf::GgufFile;
use hanzo_transformers::{ChatTemplate, Message};
use serde_json::Value;

fn template(fixture: &str) -> ChatTemplate {
    let file = GgufFile::open(common::fixture(fixture)).unwrap();
    let source = file
        .get("tokenizer.chat_template")
        .unwrap()
        .as_str()
        .unwrap();
    ChatTemplate::new(source, "", "").unwrap()
}

fn reference() -> (Vec<Message>, Vec<Value>, String) {
    let r = common::reference("qwen2.5-chat-tools-jinja2.json");
    let messages = serde_json::from_value(r["messages"].clone()).unwrap();
    let tools = serde_json::from_value(r["tools"].clone()).unwrap();
    (messages, tools, r["rendered"].as_str().unwrap().to_string())
}

#[test]
fn qwen_template_renders_tools_calls_and_results_as_transformers_does() {
    let (messages, tools, want) = reference();
    let t = template("qwen2");
    assert!(t.handles_tools());
    assert_eq!(t.render_with_tools(&messages, &tools, true).unwrap(), want);
}

#[test]
fn templates_without_tools_get_them_as_text() {
    let (messages, tools, _) = reference();
    let t = template("smollm2");
    assert!(!t.handles_tools());
    let lowered = hanzo_transformers::tools::lower(
        &messages,
        &tools,
        hanzo_transformers::tools::TOOL_CALL_TAGS,
    );
    let text = t.render(&lowered, true).unwrap();
    assert!(
        text.starts_with("<|im_start|>system\nYou can call functions"),
        "{text}"
    );
    assert!(
        text.contains("\"description\": \"The time — «UTC».\""),
        "{text}"
    );
    assert!(text.contains(
        "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>"
    ), "{text}");
    assert!(text.contains(
        "<|im_start|>user\n<tool_response>\n{\"temperature\": 17}\n</tool_response>\n<tool_response>\n{\"temperature\": 12}\n</tool_response><|im_end|>"
    ), "{text}");
}
