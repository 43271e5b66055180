//! `hanzo.LLM`: a language model in-process — text and chat completions (OpenAI-shaped
//! dicts, tool calls read out of the reply), streaming, tokenizer and logits. Requests are
//! checked as the server checks them (`hanzo_api::request`), so a value the HTTP API refuses
//! is refused here with the same message. The GIL is released while the model runs, and a
//! generation stops with `KeyboardInterrupt` on Ctrl-C.

use crate::errors;
use hanzo_api::request::{ChatRequest, GenFields};
use hanzo_ml::kv::KvDtype;
use hanzo_ml::quantized::GgmlDType;
use hanzo_transformers::tools::{ToolCallParser, ToolDelta, TOOL_CALL_TAGS};
use hanzo_transformers::{Finish, GenerateOptions, Generation, Logits, TextGeneration, WeightMode};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The global thread pool's size, set once per process (later models share it).
pub fn set_threads(threads: Option<usize>) {
    if let Some(n) = threads {
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global();
    }
}

/// The path of a model the command line would take: a file, a directory, or a store name.
pub fn resolve(model: &Path) -> PyResult<PathBuf> {
    if model.exists() {
        return Ok(model.to_path_buf());
    }
    hanzo_store::resolve_model(model).map_err(|e| {
        pyo3::exceptions::PyFileNotFoundError::new_err(format!(
            "{}: not a file, a directory or a model in the store ({e:#})",
            model.display()
        ))
    })
}

#[pyclass(name = "LLM", module = "hanzo", frozen)]
pub struct Llm {
    p: Arc<TextGeneration>,
    name: String,
    /// The most positions (prompt and reply) one generation may hold: the model's context
    /// length, or less where `max_context_tokens` asks.
    context: usize,
}

/// Python values as JSON (through the `json` module: dicts, lists, strings, numbers).
fn to_json(v: &Bound<'_, PyAny>) -> PyResult<Value> {
    let text: String = v
        .py()
        .import("json")?
        .call_method1("dumps", (v,))?
        .extract()?;
    serde_json::from_str(&text).map_err(|e| PyValueError::new_err(e.to_string()))
}

fn to_python<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?.call_method1("loads", (v.to_string(),))
}

/// Sampling keyword arguments, with OpenAI's names and ranges.
#[derive(Default)]
struct Sampling {
    max_tokens: Option<i64>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    top_k: Option<i64>,
    min_p: Option<f32>,
    seed: Option<i64>,
    stop: Option<Value>,
    presence_penalty: Option<f32>,
    frequency_penalty: Option<f32>,
    repetition_penalty: Option<f32>,
}

impl Sampling {
    fn fields(&self) -> Map<String, Value> {
        let mut m = Map::new();
        let mut put = |k: &str, v: Option<Value>| {
            if let Some(v) = v {
                m.insert(k.into(), v);
            }
        };
        put("max_tokens", self.max_tokens.map(Value::from));
        put("temperature", self.temperature.map(Value::from));
        put("top_p", self.top_p.map(Value::from));
        put("top_k", self.top_k.map(Value::from));
        put("min_p", self.min_p.map(Value::from));
        put("seed", self.seed.map(Value::from));
        put("stop", self.stop.clone());
        put("presence_penalty", self.presence_penalty.map(Value::from));
        put("frequency_penalty", self.frequency_penalty.map(Value::from));
        put(
            "repetition_penalty",
            self.repetition_penalty.map(Value::from),
        );
        m
    }
}

/// A parameter error of the API's checks as a `ValueError`.
fn api_err(e: hanzo_api::error::ApiError) -> PyErr {
    PyValueError::new_err(e.message)
}

impl Llm {
    /// Generation options from checked fields, for a prompt of `prompt_len` tokens.
    fn options(&self, gen: &GenFields, prompt_len: usize) -> PyResult<GenerateOptions> {
        let info = self.p.model.info();
        let s = gen.settings(info.vocab_size).map_err(api_err)?;
        if prompt_len >= self.context {
            return Err(PyValueError::new_err(format!(
                "the prompt has {prompt_len} tokens; the context holds {} (max_context_tokens \
                 or the model's context length), a reply needs at least one more",
                self.context
            )));
        }
        let room = self.context - prompt_len;
        Ok(GenerateOptions {
            max_tokens: s.max_tokens.unwrap_or(room).min(room),
            sampling: s.sampling,
            stop: s.stop,
            ..GenerateOptions::default()
        })
    }

    fn gen_fields(&self, s: &Sampling) -> PyResult<GenFields> {
        if let Some(m) = s.max_tokens.filter(|&m| m < 1) {
            return Err(PyValueError::new_err(format!(
                "max_tokens must be at least 1, got {m}"
            )));
        }
        if let Some(k) = s.top_k.filter(|&k| k < 0) {
            return Err(PyValueError::new_err(format!(
                "top_k must be 0 (off) or more, got {k}"
            )));
        }
        serde_json::from_value(Value::Object(s.fields()))
            .map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// A generation of one prompt (text, or messages through the chat template), its prompt
    /// read (the GIL released meanwhile).
    fn begin(
        &self,
        py: Python<'_>,
        prompt: &Bound<'_, PyAny>,
        gen: &GenFields,
    ) -> PyResult<Generation> {
        let tokens = self.prompt_tokens(prompt)?;
        self.start(py, &tokens, &self.options(gen, tokens.len())?)
    }

    fn start(
        &self,
        py: Python<'_>,
        prompt: &[u32],
        opts: &GenerateOptions,
    ) -> PyResult<Generation> {
        let p = self.p.clone();
        py.detach(|| p.start(prompt, opts)).map_err(errors::model)
    }

    /// The prompt's tokens: a string as text, a list of messages through the chat template.
    fn prompt_tokens(&self, prompt: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
        if let Ok(text) = prompt.extract::<String>() {
            return Ok(self.p.text_tokens(&text));
        }
        let (messages, tools) = self.chat_request(prompt, None)?;
        self.p
            .chat_tokens_with_tools(&messages, &tools)
            .map_err(errors::model)
    }

    /// Messages and tools, checked as the server checks a chat request.
    #[allow(clippy::type_complexity)]
    fn chat_request(
        &self,
        messages: &Bound<'_, PyAny>,
        tools: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(Vec<hanzo_transformers::Message>, Vec<Value>)> {
        let mut req = Map::new();
        req.insert("model".into(), Value::from(self.name.as_str()));
        req.insert("messages".into(), to_json(messages)?);
        if let Some(t) = tools {
            req.insert("tools".into(), to_json(t)?);
        }
        let r: ChatRequest = serde_json::from_value(Value::Object(req))
            .map_err(|e| PyValueError::new_err(format!("invalid chat request: {e}")))?;
        let msgs = r.messages().map_err(api_err)?;
        Ok((msgs, r.tools.unwrap_or_default()))
    }
}

/// Runs `g` to its end, releasing the GIL for each step and checking for Ctrl-C between them.
fn run_to_end(py: Python<'_>, p: &TextGeneration, g: &mut Generation) -> PyResult<()> {
    while g.finish().is_none() {
        py.detach(|| p.step(g)).map_err(errors::model)?;
        if let Err(e) = py.check_signals() {
            g.cancel();
            return Err(e);
        }
    }
    Ok(())
}

fn finish_reason(f: Finish) -> &'static str {
    match f {
        Finish::Length => "length",
        Finish::Stop | Finish::EndOfText | Finish::Cancelled => "stop",
    }
}

/// Nanoseconds since the Unix epoch: what makes the ids below unique within a process.
fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

fn new_id(prefix: &str) -> String {
    format!("{prefix}-{:x}", nanos())
}

#[pymethods]
impl Llm {
    /// `LLM(model, threads=None, isq=None, max_context_tokens=None)`: `model` is what the
    /// command line takes — a GGUF file, a model directory (config.json, *.safetensors,
    /// tokenizer.json) or a name in the model store; `isq` quantizes float weights while
    /// loading (e.g. "q8_0", "q4_k"); `max_context_tokens` caps the positions (prompt and
    /// reply) one generation holds, and so its KV cache (default: the model's context).
    #[new]
    #[pyo3(signature = (model, threads=None, isq=None, max_context_tokens=None))]
    fn new(
        py: Python<'_>,
        model: PathBuf,
        threads: Option<usize>,
        isq: Option<&str>,
        max_context_tokens: Option<usize>,
    ) -> PyResult<Self> {
        if max_context_tokens.is_some_and(|m| m < 2) {
            return Err(PyValueError::new_err(
                "max_context_tokens must be at least 2 (a prompt token and a reply token)",
            ));
        }
        set_threads(threads);
        let path = resolve(&model)?;
        let mode = match isq {
            Some(t) => WeightMode::Quantize(
                GgmlDType::from_name(t).map_err(|e| PyValueError::new_err(format!("isq: {e}")))?,
            ),
            None => WeightMode::AsStored,
        };
        // Loaded and brought to the steady state a server's generations see, so that every
        // call computes the same (the first prompt pass would otherwise read the weights as
        // stored); the move onto huge pages goes on in the background.
        let p = py
            .detach(|| {
                let p = TextGeneration::load(&path, mode)?;
                p.page_in()?;
                Ok(p)
            })
            .map_err(|e| match e {
                hanzo_transformers::Error::Io(io) => pyo3::exceptions::PyOSError::new_err(format!(
                    "cannot load {}: {io}",
                    path.display()
                )),
                e => PyValueError::new_err(format!("cannot load {}: {e}", path.display())),
            })?;
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into(),
        );
        let context = p.model.info().context_length;
        Ok(Llm {
            p: Arc::new(p),
            name,
            context: max_context_tokens.map_or(context, |m| m.min(context)),
        })
    }

    /// Architecture, sizes and context length.
    #[getter]
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let i = self.p.model.info();
        let d = PyDict::new(py);
        d.set_item("architecture", i.architecture.to_string())?;
        d.set_item("layers", i.layers)?;
        d.set_item("hidden_size", i.hidden_size)?;
        d.set_item("vocab_size", i.vocab_size)?;
        d.set_item("context_length", i.context_length)?;
        d.set_item("max_context_tokens", self.context)?;
        Ok(d)
    }

    /// Continues `prompt` (a string; a list of messages goes through the chat template) and
    /// returns the text. Defaults as the OpenAI API's (temperature 1; 0 is greedy).
    #[pyo3(signature = (prompt, max_tokens=256, temperature=None, top_p=None, top_k=None, min_p=None, seed=None, stop=None, presence_penalty=None, frequency_penalty=None, repetition_penalty=None))]
    #[allow(clippy::too_many_arguments)]
    fn generate<'py>(
        &self,
        py: Python<'py>,
        prompt: &Bound<'py, PyAny>,
        max_tokens: Option<i64>,
        temperature: Option<f32>,
        top_p: Option<f32>,
        top_k: Option<i64>,
        min_p: Option<f32>,
        seed: Option<i64>,
        stop: Option<&Bound<'py, PyAny>>,
        presence_penalty: Option<f32>,
        frequency_penalty: Option<f32>,
        repetition_penalty: Option<f32>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let s = Sampling {
            max_tokens,
            temperature,
            top_p,
            top_k,
            min_p,
            seed,
            stop: stop.map(to_json).transpose()?,
            presence_penalty,
            frequency_penalty,
            repetition_penalty,
        };
        let gen = self.gen_fields(&s)?;
        if let Some(prompts) = batch_prompts(prompt)? {
            let texts = self.generate_batch(py, &prompts, &gen, s.seed)?;
            return Ok(PyList::new(py, texts)?.into_any());
        }
        let mut g = self.begin(py, prompt, &gen)?;
        run_to_end(py, &self.p, &mut g)?;
        Ok(pyo3::types::PyString::new(py, &g.into_generated().text).into_any())
    }

    /// As `generate`, as an iterator of text pieces (their concatenation is `generate`'s
    /// text); `async for` works through `hanzo.LLM.astream`.
    #[pyo3(signature = (prompt, max_tokens=256, temperature=None, top_p=None, top_k=None, min_p=None, seed=None, stop=None, presence_penalty=None, frequency_penalty=None, repetition_penalty=None))]
    #[allow(clippy::too_many_arguments)]
    fn stream(
        &self,
        py: Python<'_>,
        prompt: &Bound<'_, PyAny>,
        max_tokens: Option<i64>,
        temperature: Option<f32>,
        top_p: Option<f32>,
        top_k: Option<i64>,
        min_p: Option<f32>,
        seed: Option<i64>,
        stop: Option<&Bound<'_, PyAny>>,
        presence_penalty: Option<f32>,
        frequency_penalty: Option<f32>,
        repetition_penalty: Option<f32>,
    ) -> PyResult<Stream> {
        let s = Sampling {
            max_tokens,
            temperature,
            top_p,
            top_k,
            min_p,
            seed,
            stop: stop.map(to_json).transpose()?,
            presence_penalty,
            frequency_penalty,
            repetition_penalty,
        };
        let g = self.begin(py, prompt, &self.gen_fields(&s)?)?;
        Ok(Stream {
            p: self.p.clone(),
            g: Mutex::new(g),
        })
    }

    /// A chat completion as the OpenAI API returns it (a dict: `choices[0].message` with
    /// `content` and, where the model called tools, `tool_calls`; `usage`).
    #[pyo3(signature = (messages, tools=None, tool_choice=None, response_format=None, max_tokens=None, temperature=None, top_p=None, top_k=None, min_p=None, seed=None, stop=None, presence_penalty=None, frequency_penalty=None, repetition_penalty=None))]
    #[allow(clippy::too_many_arguments)]
    fn chat<'py>(
        &self,
        py: Python<'py>,
        messages: &Bound<'py, PyAny>,
        tools: Option<&Bound<'py, PyAny>>,
        tool_choice: Option<&Bound<'py, PyAny>>,
        response_format: Option<&Bound<'py, PyAny>>,
        max_tokens: Option<i64>,
        temperature: Option<f32>,
        top_p: Option<f32>,
        top_k: Option<i64>,
        min_p: Option<f32>,
        seed: Option<i64>,
        stop: Option<&Bound<'py, PyAny>>,
        presence_penalty: Option<f32>,
        frequency_penalty: Option<f32>,
        repetition_penalty: Option<f32>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if let Some(f) = response_format {
            let f = to_json(f)?;
            if f.get("type").and_then(Value::as_str) != Some("text") {
                return Err(PyValueError::new_err(
                    "response_format: only {\"type\": \"text\"} is supported in-process; JSON \
                     output is enforced by `hanzo-engine serve`",
                ));
            }
        }
        let tools = match tool_choice.map(to_json).transpose()? {
            None => tools,
            Some(Value::String(c)) if c == "auto" => tools,
            Some(Value::String(c)) if c == "none" => None,
            Some(c) => {
                return Err(PyValueError::new_err(format!(
                    "tool_choice {c}: only \"auto\" and \"none\" are supported in-process"
                )))
            }
        };
        let s = Sampling {
            max_tokens,
            temperature,
            top_p,
            top_k,
            min_p,
            seed,
            stop: stop.map(to_json).transpose()?,
            presence_penalty,
            frequency_penalty,
            repetition_penalty,
        };
        let gen = self.gen_fields(&s)?;
        let (msgs, tools) = self.chat_request(messages, tools)?;
        let tokens = self
            .p
            .chat_tokens_with_tools(&msgs, &tools)
            .map_err(errors::model)?;
        let opts = self.options(&gen, tokens.len())?;
        let mut g = self.start(py, &tokens, &opts)?;
        run_to_end(py, &self.p, &mut g)?;
        let done = g.into_generated();
        let mut message = json!({"role": "assistant", "content": done.text});
        let mut reason = finish_reason(done.finish);
        if !tools.is_empty() {
            let (content, calls) = read_tool_calls(&done.text);
            if !calls.is_empty() {
                message["content"] = if content.trim().is_empty() {
                    Value::Null
                } else {
                    Value::from(content)
                };
                message["tool_calls"] = Value::Array(calls);
                reason = "tool_calls";
            }
        }
        let reply = json!({
            "id": new_id("chatcmpl"),
            "object": "chat.completion",
            "created": hanzo_api::response::unix_time(),
            "model": self.name,
            "choices": [{"index": 0, "message": message, "finish_reason": reason}],
            "usage": {
                "prompt_tokens": done.prompt_tokens,
                "completion_tokens": done.tokens.len(),
                "total_tokens": done.prompt_tokens + done.tokens.len(),
            },
        });
        to_python(py, &reply)
    }

    /// Token ids of `text` (`add_special`: BOS/EOS as the model's flags say;
    /// `parse_special`: special-token text such as `<|im_end|>` becomes its token).
    #[pyo3(signature = (text, add_special=true, parse_special=false))]
    fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        self.p.tokenizer.encode(text, add_special, parse_special)
    }

    /// The text of token ids (`special`: special tokens written out too).
    #[pyo3(signature = (tokens, special=false))]
    fn detokenize(&self, tokens: Vec<u32>, special: bool) -> PyResult<String> {
        self.check_ids(&tokens)?;
        Ok(self.p.tokenizer.decode(&tokens, special))
    }

    /// Perplexity of `text` as llama.cpp's `llama-perplexity` (and `hanzo-engine perplexity`)
    /// computes it: non-overlapping chunks of `ctx` tokens, each one's second half scored.
    /// A dict: `perplexity`, `stderr`, `chunks`, `scored` (tokens).
    #[pyo3(signature = (text, ctx=512))]
    fn perplexity<'py>(
        &self,
        py: Python<'py>,
        text: &str,
        ctx: usize,
    ) -> PyResult<Bound<'py, PyDict>> {
        let p = self.p.clone();
        let r = py
            .detach(|| {
                hanzo_transformers::perplexity::compute(&p, text, ctx, KvDtype::F16, |_, _| {})
            })
            .map_err(errors::model)?;
        let d = PyDict::new(py);
        d.set_item("perplexity", r.ppl)?;
        d.set_item("stderr", r.stderr)?;
        d.set_item("chunks", r.chunks)?;
        d.set_item("scored", r.scored)?;
        Ok(d)
    }

    /// The logits after each of `tokens` (one forward pass from an empty context), as a
    /// float32 NumPy array of shape (len(tokens), vocab_size).
    fn logits<'py>(&self, py: Python<'py>, tokens: Vec<u32>) -> PyResult<Bound<'py, PyAny>> {
        self.check_ids(&tokens)?;
        let ctx = self.p.model.info().context_length;
        if tokens.is_empty() || tokens.len() > ctx {
            return Err(PyValueError::new_err(format!(
                "logits needs 1 to {ctx} tokens (the context length), got {}",
                tokens.len()
            )));
        }
        let p = self.p.clone();
        let t = py
            .detach(|| {
                let mut cache = p.model.new_cache(tokens.len());
                cache.set_lora(p.lora());
                p.model.forward(&tokens, &mut cache, Logits::All)
            })
            .map_err(errors::model)?;
        crate::array::to_numpy(py, &t)
    }
}

/// The prompts of a batch: a list whose items are strings or lists of messages (a list of
/// messages alone is one chat prompt); `None` for one prompt.
fn batch_prompts<'py>(prompt: &Bound<'py, PyAny>) -> PyResult<Option<Vec<Bound<'py, PyAny>>>> {
    let Ok(list) = prompt.cast::<PyList>() else {
        return Ok(None);
    };
    let items: Vec<_> = list.iter().collect();
    let is_batch = items
        .iter()
        .all(|i| i.extract::<String>().is_ok() || i.cast::<PyList>().is_ok());
    if items.is_empty() || !is_batch {
        return Ok(None);
    }
    Ok(Some(items))
}

impl Llm {
    /// Every prompt through the batched core together (`generate([...])`); with a seed,
    /// prompt `i` samples with `seed + i`.
    fn generate_batch(
        &self,
        py: Python<'_>,
        prompts: &[Bound<'_, PyAny>],
        gen: &GenFields,
        seed: Option<i64>,
    ) -> PyResult<Vec<String>> {
        let mut tokens = Vec::with_capacity(prompts.len());
        let mut opts = Vec::with_capacity(prompts.len());
        for (i, p) in prompts.iter().enumerate() {
            let t = self.prompt_tokens(p)?;
            let mut o = self.options(gen, t.len())?;
            if let Some(s) = seed {
                o.sampling.seed = (s as u64).wrapping_add(i as u64);
            }
            tokens.push(t);
            opts.push(o);
        }
        let p = self.p.clone();
        let mut b = py
            .detach(|| p.start_batch(&tokens, &opts))
            .map_err(errors::model)?;
        while !b.is_done() {
            py.detach(|| p.step_batch(&mut b)).map_err(errors::model)?;
            if let Err(e) = py.check_signals() {
                b.cancel();
                return Err(e);
            }
        }
        Ok(b.into_generated().into_iter().map(|g| g.text).collect())
    }

    fn check_ids(&self, tokens: &[u32]) -> PyResult<()> {
        let vocab = self.p.model.info().vocab_size;
        match tokens.iter().find(|&&t| t as usize >= vocab) {
            Some(t) => Err(PyValueError::new_err(format!(
                "token id {t} is out of range: the vocabulary has {vocab} tokens"
            ))),
            None => Ok(()),
        }
    }
}

/// The reply's text and its tool calls (OpenAI's shape: id, type, function name and
/// arguments as a JSON string).
fn read_tool_calls(text: &str) -> (String, Vec<Value>) {
    let mut parser = ToolCallParser::new(TOOL_CALL_TAGS);
    let mut deltas = parser.push(text);
    deltas.extend(parser.finish());
    let mut content = String::new();
    let mut calls: Vec<(String, String)> = Vec::new();
    for d in deltas {
        match d {
            ToolDelta::Content(t) => content.push_str(&t),
            ToolDelta::Call { name, .. } => calls.push((name, String::new())),
            ToolDelta::Arguments { index, text } => {
                if let Some(c) = calls.get_mut(index) {
                    c.1.push_str(&text);
                }
            }
        }
    }
    let calls = calls
        .into_iter()
        .enumerate()
        .map(|(i, (name, args))| {
            json!({
                "id": call_id(i),
                "type": "function",
                "function": {"name": name, "arguments": args},
            })
        })
        .collect();
    (content, calls)
}

/// A tool call's id as OpenAI's look: `call_` and 24 hex digits (the clock's nanoseconds and
/// the call's index: unique within a process).
fn call_id(index: usize) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "call_{:024x}",
        (nanos << 8 | index as u128) & ((1 << 96) - 1)
    )
}

/// The pieces of a generation, as a Python iterator (`LLM.stream`).
#[pyclass(module = "hanzo", frozen)]
pub struct Stream {
    p: Arc<TextGeneration>,
    g: Mutex<Generation>,
}

#[pymethods]
impl Stream {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// The next piece of text (the GIL released while the model runs).
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<String>> {
        loop {
            let (piece, done) = py
                .detach(|| {
                    let mut g = self.g.lock().unwrap_or_else(|e| e.into_inner());
                    let piece = self.p.step(&mut g)?;
                    Ok::<_, hanzo_transformers::Error>((piece, g.finish().is_some()))
                })
                .map_err(errors::model)?;
            if !piece.is_empty() {
                return Ok(Some(piece));
            }
            if done {
                return Ok(None);
            }
            py.check_signals()?;
        }
    }

    /// Why the generation ended ("stop", "length"), None while it goes on.
    #[getter]
    fn finish_reason(&self) -> Option<&'static str> {
        let g = self.g.lock().unwrap_or_else(|e| e.into_inner());
        g.finish().map(finish_reason)
    }

    /// The token ids generated so far.
    #[getter]
    fn tokens<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let g = self.g.lock().unwrap_or_else(|e| e.into_inner());
        PyList::new(py, g.tokens())
    }

    /// Ends the generation here.
    fn close(&self) {
        self.g.lock().unwrap_or_else(|e| e.into_inner()).cancel();
    }
}
