//! The local tools: hostile paths are refused and nothing outside the sandbox is read or
//! written (checked on the filesystem afterwards); tools not granted, or granted without
//! what backs them, do not exist for the model.
#![cfg(unix)]

use hanzo_edge::tools::{Clipboard, LocalTool, LocalTools, Sandbox};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A sandbox `box/` beside a directory `outside/` holding a secret, with every kind of way
/// out planted inside the sandbox.
fn setup(name: &str) -> (PathBuf, Sandbox) {
    let base = std::env::temp_dir().join(format!("hanzo-tools-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let (inside, outside) = (base.join("box"), base.join("outside"));
    std::fs::create_dir_all(inside.join("sub")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "SECRET").unwrap();
    std::fs::write(inside.join("notes.txt"), "the word is lighthouse").unwrap();
    std::fs::write(inside.join("sub/a.txt"), "a").unwrap();
    let link = |to: &Path, at: &str| std::os::unix::fs::symlink(to, inside.join(at)).unwrap();
    link(Path::new("../outside/secret.txt"), "link_out");
    link(&outside.join("secret.txt"), "abs_link");
    link(&outside, "dirlink");
    link(Path::new("../../outside"), "sub/uplink");
    link(Path::new("/dev/null"), "devnull");
    std::fs::hard_link(outside.join("secret.txt"), inside.join("hard")).unwrap();
    let fifo = std::process::Command::new("mkfifo")
        .arg(inside.join("pipe"))
        .status()
        .unwrap();
    assert!(fifo.success());
    let sandbox = Sandbox::new(&inside).unwrap();
    (base, sandbox)
}

/// Every file under `dir` with its bytes (links as their targets).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        let meta = std::fs::symlink_metadata(&p).unwrap();
        if meta.file_type().is_symlink() {
            out.insert(
                p.clone(),
                std::fs::read_link(&p)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes(),
            );
        } else if meta.is_dir() {
            out.extend(snapshot(&p));
        } else if meta.is_file() {
            out.insert(p.clone(), std::fs::read(&p).unwrap());
        }
    }
    out
}

fn hostile_paths(base: &Path) -> Vec<String> {
    let abs = base
        .join("outside/secret.txt")
        .to_string_lossy()
        .into_owned();
    vec![
        "../outside/secret.txt".into(),
        "sub/../../outside/secret.txt".into(),
        "./../outside/secret.txt".into(),
        "sub/./../../outside/secret.txt".into(),
        "/etc/passwd".into(),
        abs,
        "link_out".into(),
        "abs_link".into(),
        "dirlink/secret.txt".into(),
        "sub/uplink/secret.txt".into(),
        "hard".into(),
        "pipe".into(),
        "devnull".into(),
        "notes.txt\0.png".into(),
        "\0".into(),
        "a".repeat(300),
        "a/".repeat(600),
        "\u{FF0E}\u{FF0E}/outside/secret.txt".into(),
        "\u{2024}\u{2024}/outside/secret.txt".into(),
        "\u{FE52}\u{FE52}/outside/secret.txt".into(),
        "\u{2025}/outside/secret.txt".into(),
        "...".into(),
        "..\\outside\\secret.txt".into(),
        "~/secret.txt".into(),
        "C:/outside/secret.txt".into(),
        "notes\u{202E}txt.exe".into(),
        "\u{200B}../outside/secret.txt".into(),
        "sub\u{0000}/a.txt".into(),
        "line\nbreak".into(),
        "".into(),
        ".".into(),
        "sub".into(),
    ]
}

#[test]
fn hostile_paths_are_refused_and_nothing_outside_is_touched() {
    let (base, sandbox) = setup("hostile");
    let outside_before = snapshot(&base.join("outside"));
    let inside_before = snapshot(sandbox.root());
    let tools = LocalTools::files(
        sandbox.clone(),
        [
            LocalTool::FileRead,
            LocalTool::FileWrite,
            LocalTool::FileList,
        ],
    );
    let paths = hostile_paths(&base);
    assert!(paths.len() >= 25);
    for p in &paths {
        let read = tools.call("file_read", &json!({"path": p}));
        assert!(read.is_err(), "read {p:?} gave {read:?}");
        let write = tools.call("file_write", &json!({"path": p, "content": "PWNED"}));
        assert!(write.is_err(), "write {p:?} gave {write:?}");
        assert!(!read.unwrap_err().contains("SECRET"));
    }
    for p in [
        "..",
        "dirlink",
        "sub/uplink",
        "/",
        "\u{FF0E}\u{FF0E}",
        "notes.txt",
    ] {
        let list = tools.call("file_list", &json!({"path": p}));
        assert!(list.is_err(), "list {p:?} gave {list:?}");
    }
    // Too big to write, too big to read.
    let mut small = sandbox.clone();
    small.max_write_bytes = 10;
    small.max_read_bytes = 5;
    assert!(small.write("big.txt", "01234567890").is_err());
    assert!(small.read("notes.txt").is_err());
    // Nothing outside changed, nothing appeared, and inside only what was written there.
    assert_eq!(snapshot(&base.join("outside")), outside_before);
    assert_eq!(snapshot(sandbox.root()), inside_before);
    let names: Vec<_> = std::fs::read_dir(&base)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    eprintln!("{} hostile paths refused for read and write", paths.len());
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn files_inside_are_read_written_whole_and_listed() {
    let (base, sandbox) = setup("inside");
    let tools = LocalTools::files(
        sandbox.clone(),
        [
            LocalTool::FileRead,
            LocalTool::FileWrite,
            LocalTool::FileList,
        ],
    );
    let read = |p: &str| tools.call("file_read", &json!({"path": p}));
    assert_eq!(read("notes.txt").unwrap(), "the word is lighthouse");
    assert_eq!(read("./sub//a.txt").unwrap(), "a");
    let wrote = tools
        .call(
            "file_write",
            &json!({"path": "new/deeper/todo.txt", "content": "buy bread"}),
        )
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&wrote).unwrap()["bytes_written"],
        9
    );
    assert_eq!(read("new/deeper/todo.txt").unwrap(), "buy bread");
    // Replaced whole, and no temporary file left behind.
    tools
        .call(
            "file_write",
            &json!({"path": "notes.txt", "content": "short"}),
        )
        .unwrap();
    assert_eq!(read("notes.txt").unwrap(), "short");
    let listing: Value =
        serde_json::from_str(&tools.call("file_list", &json!({})).unwrap()).unwrap();
    let entries: Vec<(String, String)> = listing["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().into(),
                e["type"].as_str().unwrap().into(),
            )
        })
        .collect();
    let kind = |n: &str| entries.iter().find(|e| e.0 == n).map(|e| e.1.as_str());
    assert_eq!(kind("notes.txt"), Some("file"));
    assert_eq!(kind("sub"), Some("dir"));
    assert_eq!(kind("dirlink"), Some("symlink"));
    assert_eq!(kind("pipe"), Some("other"));
    assert!(!entries.iter().any(|e| e.0.contains("tmp")), "{entries:?}");
    let sub: Value =
        serde_json::from_str(&tools.call("file_list", &json!({"path": "sub"})).unwrap()).unwrap();
    assert_eq!(sub["entries"].as_array().unwrap().len(), 2); // a.txt and the uplink
                                                             // Arguments the model got wrong are errors it reads, not panics.
    assert!(tools
        .call("file_read", &json!({}))
        .unwrap_err()
        .contains("path"));
    assert!(tools.call("file_read", &json!({"path": 3})).is_err());
    std::fs::remove_dir_all(&base).unwrap();
}

struct TestClipboard(Mutex<String>);

impl Clipboard for TestClipboard {
    fn read(&self) -> Result<String, String> {
        Ok(self.0.lock().unwrap().clone())
    }
    fn write(&self, text: &str) -> Result<(), String> {
        *self.0.lock().unwrap() = text.into();
        Ok(())
    }
}

#[test]
fn only_granted_and_backed_tools_exist() {
    let (base, sandbox) = setup("grants");
    let names = |t: &LocalTools| -> Vec<String> {
        t.definitions()
            .iter()
            .map(|d| d["function"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(names(&LocalTools::default()).is_empty());
    let read_only = LocalTools::files(sandbox.clone(), [LocalTool::FileRead]);
    assert_eq!(names(&read_only), ["file_read"]);
    let refused = read_only
        .call("file_write", &json!({"path": "x.txt", "content": "y"}))
        .unwrap_err();
    assert!(refused.contains("no tool"), "{refused}");
    assert!(!sandbox.root().join("x.txt").exists());
    // Granted, but the host gave no clipboard: absent.
    let mut tools = read_only.clone();
    tools.allow.insert(LocalTool::ClipboardRead);
    tools.allow.insert(LocalTool::ClipboardWrite);
    assert_eq!(names(&tools), ["file_read"]);
    assert!(tools.call("clipboard_read", &json!({})).is_err());
    // With the host's clipboard.
    let clip = Arc::new(TestClipboard(Mutex::new("copied".into())));
    tools.clipboard = Some(clip.clone());
    assert_eq!(
        names(&tools),
        ["file_read", "clipboard_read", "clipboard_write"]
    );
    assert_eq!(tools.call("clipboard_read", &json!({})).unwrap(), "copied");
    tools
        .call("clipboard_write", &json!({"text": "pasted"}))
        .unwrap();
    assert_eq!(*clip.0.lock().unwrap(), "pasted");
    // A file tool without a sandbox does not exist either.
    let mut no_box = tools.clone();
    no_box.sandbox = None;
    assert_eq!(names(&no_box), ["clipboard_read", "clipboard_write"]);
    // The schemas are what OpenAI's `tools` takes.
    for d in tools.definitions() {
        assert_eq!(d["type"], "function");
        assert_eq!(d["function"]["parameters"]["type"], "object");
    }
    std::fs::remove_dir_all(&base).unwrap();
}

#[path = "../../../scripts/fixture_path.rs"]
mod fixture_path;

fn greedy(max_tokens: usize) -> hanzo_transformers::GenerateOptions {
    hanzo_transformers::GenerateOptions {
        max_tokens,
        sampling: hanzo_transformers::SamplingParams {
            temperature: 0.0,
            ..Default::default()
        },
        ..Default::default()
    }
}

#[test]
fn a_model_reads_a_file_through_the_tool_loop() {
    use hanzo_edge::{Edge, EdgeConfig};
    use hanzo_transformers::Message;
    let (base, sandbox) = setup("agent");
    std::fs::write(
        sandbox.root().join("notes.txt"),
        "The password is marmalade.",
    )
    .unwrap();
    let mut cfg = EdgeConfig::new(fixture_path::fixture("qwen2"), 2048, 2 << 30);
    cfg.tools = LocalTools::files(sandbox.clone(), [LocalTool::FileRead]);
    let mut edge = Edge::new(cfg).unwrap();
    let ask = [
        Message::new(
            "system",
            "You are a helpful assistant. Call a tool only to get what you do not know yet; \
             once a tool has answered, reply to the user in words.",
        ),
        Message::new(
            "user",
            "What is the password written in the file notes.txt? Read the file to find out.",
        ),
    ];
    let run = edge.chat_with_tools(&ask, &greedy(96), 4).unwrap();
    for m in &run.messages {
        eprintln!("[{}] {:?} {:?}", m.role, m.content, m.tool_calls);
    }
    // The model asked for the file, by the tool's name, with the path it was given, and got
    // the file's text back as the next turn.
    let first = &run.calls[0];
    assert_eq!(first.name, "file_read");
    assert_eq!(first.arguments["path"], "notes.txt");
    assert_eq!(first.result.as_deref(), Ok("The password is marmalade."));
    let result = &run.messages[3];
    assert_eq!(result.role, "tool");
    assert_eq!(result.content, "The password is marmalade.");
    assert_eq!(result.tool_call_id.as_deref(), Some("call_1_0"));
    assert_eq!(run.messages[2].tool_calls[0].id, "call_1_0");
    // It went on from there and the loop ended inside its limit, each call run once (this
    // 0.5B model answers the result with a call again, which is not run twice).
    assert!(run.steps <= 4, "{} steps", run.steps);
    assert!(run.calls.iter().filter(|c| c.name == "file_read").count() <= 2);
    assert_eq!(run.messages.last().unwrap().role, "assistant");
    eprintln!("reply after {} steps: {:?}", run.steps, run.reply);
    // What the file said reached the reply (this model writes it as JSON).
    assert!(run.reply.contains("marmalade"), "{}", run.reply);

    // With two steps, the second reply is made with the tools withdrawn.
    edge.reset();
    let run = edge.chat_with_tools(&ask, &greedy(64), 2).unwrap();
    assert_eq!((run.steps, run.calls.len()), (2, 1), "{run:?}");
    assert!(run.stopped_at_limit);
    // With one, no tool is offered at all.
    let run = edge.chat_with_tools(&ask, &greedy(64), 1).unwrap();
    assert!(
        run.calls.is_empty() && run.steps == 1 && !run.stopped_at_limit,
        "{run:?}"
    );
    std::fs::remove_dir_all(&base).unwrap();
}
