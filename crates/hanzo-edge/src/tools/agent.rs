//! [`Edge::chat_with_tools`]: a conversation whose tool calls are run on the device until the
//! model answers in words, or a step limit is reached.

use crate::{Edge, EdgeError, Event};
use hanzo_transformers::chat_template::{FunctionCall, ToolCall};
use hanzo_transformers::tools::{ToolCallParser, ToolDelta, TOOL_CALL_TAGS};
use hanzo_transformers::{GenerateOptions, Message};
use serde_json::Value;

/// One call the model made and what it got back.
#[derive(Clone, Debug)]
pub struct CallRecord {
    pub name: String,
    /// The arguments as the model wrote them (`Value::String` of the text when not JSON).
    pub arguments: Value,
    /// The tool's answer, or the error the model was shown.
    pub result: Result<String, String>,
}

/// What [`Edge::chat_with_tools`] did.
#[derive(Clone, Debug)]
pub struct ToolRun {
    /// The model's last reply text (its answer, or what it said with its last calls when the
    /// step limit stopped it).
    pub reply: String,
    /// Every call, in order.
    pub calls: Vec<CallRecord>,
    /// Replies generated (each one with calls is a step).
    pub steps: usize,
    /// Whether the model was still calling tools when `max_steps` ran out.
    pub stopped_at_limit: bool,
    /// The conversation as it stands: the caller's messages, then the assistant's calls,
    /// the tools' results and the final reply.
    pub messages: Vec<Message>,
}

impl Edge {
    /// Answers `messages` with the tools [`crate::EdgeConfig::tools`] grants: each reply's
    /// calls are run and their results added to the conversation as `tool` messages, and the
    /// model goes on, for at most `max_steps` replies (the last one with the tools
    /// withdrawn, so it answers from what it has). A failing call is not an error: the model
    /// is shown what went wrong. A reply that asks nothing new (calls repeating answered
    /// ones, or naming tools there are not) is asked again without tools.
    pub fn chat_with_tools(
        &mut self,
        messages: &[Message],
        opts: &GenerateOptions,
        max_steps: usize,
    ) -> Result<ToolRun, EdgeError> {
        let tools = self.config.tools.clone();
        let definitions = tools.definitions();
        let mut run = ToolRun {
            reply: String::new(),
            calls: Vec::new(),
            steps: 0,
            stopped_at_limit: false,
            messages: messages.to_vec(),
        };
        let mut answered: Vec<(String, Value)> = Vec::new();
        loop {
            // The tools are offered in every reply but the last the limit allows.
            let offer = run.steps + 1 < max_steps.max(1);
            run.steps += 1;
            let offered = if offer { &definitions[..] } else { &[] };
            let (mut text, calls) = self.reply_with_calls(&run.messages, offered, opts)?;
            // Nothing new asked (every call repeats one answered, or names no tool there is:
            // small models do both): the tools are withdrawn for one more reply.
            let new = calls
                .iter()
                .any(|c| !answered.contains(c) && tools.has(&c.0));
            if !calls.is_empty() && !new {
                text = self.reply_with_calls(&run.messages, &[], opts)?.0;
            }
            if !new {
                run.reply = text.trim().to_string();
                run.stopped_at_limit = !offer && !run.calls.is_empty();
                run.messages.push(Message::new("assistant", &run.reply));
                return Ok(run);
            }
            run.reply = text.trim().to_string();
            let mut said = Message::new("assistant", &run.reply);
            answered.extend(calls.iter().cloned());
            let step = run.steps;
            said.tool_calls = calls
                .iter()
                .enumerate()
                .map(|(i, (name, arguments))| ToolCall {
                    id: format!("call_{step}_{i}"),
                    kind: "function".into(),
                    function: FunctionCall {
                        name: name.clone(),
                        arguments: arguments.clone(),
                    },
                })
                .collect();
            let ids: Vec<String> = said.tool_calls.iter().map(|c| c.id.clone()).collect();
            run.messages.push(said);
            for ((name, arguments), id) in calls.into_iter().zip(ids) {
                let result = match &arguments {
                    Value::Object(_) => tools.call(&name, &arguments),
                    _ => Err(format!("{name}: the arguments are not a JSON object")),
                };
                tracing::info!(
                    "tool {name}({arguments}): {}",
                    match &result {
                        Ok(r) => format!("{} bytes", r.len()),
                        Err(e) => format!("refused: {e}"),
                    }
                );
                let content = match &result {
                    Ok(r) => r.clone(),
                    Err(e) => format!("error: {e}"),
                };
                let mut answer = Message::new("tool", &content);
                answer.tool_call_id = Some(id);
                run.messages.push(answer);
                run.calls.push(CallRecord {
                    name,
                    arguments,
                    result,
                });
            }
        }
    }

    /// One reply, its text apart from its calls (`(name, arguments)`); with no tools
    /// offered, all of it is text.
    fn reply_with_calls(
        &mut self,
        messages: &[Message],
        definitions: &[Value],
        opts: &GenerateOptions,
    ) -> Result<(String, Vec<(String, Value)>), EdgeError> {
        let mut parser = ToolCallParser::new(TOOL_CALL_TAGS);
        let mut text = String::new();
        let mut calls: Vec<(String, String)> = Vec::new();
        let mut take = |deltas: Vec<ToolDelta>| {
            for d in deltas {
                match d {
                    ToolDelta::Content(t) => text.push_str(&t),
                    ToolDelta::Call { name, .. } => calls.push((name, String::new())),
                    ToolDelta::Arguments { text, .. } => {
                        if let Some(last) = calls.last_mut() {
                            last.1.push_str(&text);
                        }
                    }
                }
            }
        };
        for event in self.chat_offering_tools(messages, definitions, opts)? {
            if let Event::Text(piece) = event? {
                match definitions.is_empty() {
                    true => take(vec![ToolDelta::Content(piece)]),
                    false => take(parser.push(&piece)),
                }
            }
        }
        take(parser.finish());
        let calls = calls
            .into_iter()
            .map(|(name, args)| {
                let value = serde_json::from_str(&args).unwrap_or(Value::String(args));
                (name, value)
            })
            .collect();
        Ok((text, calls))
    }
}
