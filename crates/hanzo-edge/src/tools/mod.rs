//! Local tools: functions the model may call on the device, each one only when the host has
//! granted it ([`LocalTools::allow`]) and has what it needs (a [`Sandbox`] for the file
//! tools, a callback for the clipboard, sensors and location). A tool not granted is not
//! described to the model and a call to it is refused.
//!
//! The same tools reach MCP clients through `hanzo-edge mcp`, and [`crate::Edge::chat_with_tools`]
//! runs a conversation's calls to completion.

mod agent;
mod sandbox;

pub use agent::{CallRecord, ToolRun};
pub use sandbox::Sandbox;

use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

/// The tools there are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LocalTool {
    FileRead,
    FileWrite,
    FileList,
    ClipboardRead,
    ClipboardWrite,
    Sensor,
    Location,
}

impl LocalTool {
    pub const ALL: [LocalTool; 7] = [
        LocalTool::FileRead,
        LocalTool::FileWrite,
        LocalTool::FileList,
        LocalTool::ClipboardRead,
        LocalTool::ClipboardWrite,
        LocalTool::Sensor,
        LocalTool::Location,
    ];

    /// The name the model calls it by.
    pub fn name(self) -> &'static str {
        match self {
            LocalTool::FileRead => "file_read",
            LocalTool::FileWrite => "file_write",
            LocalTool::FileList => "file_list",
            LocalTool::ClipboardRead => "clipboard_read",
            LocalTool::ClipboardWrite => "clipboard_write",
            LocalTool::Sensor => "sensor_read",
            LocalTool::Location => "location",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    fn description(self) -> &'static str {
        match self {
            LocalTool::FileRead => "Read a UTF-8 text file from the user's shared folder. Returns its text.",
            LocalTool::FileWrite => "Write a UTF-8 text file in the user's shared folder, replacing it whole if it exists.",
            LocalTool::FileList => "List the files and folders in a folder of the user's shared folder.",
            LocalTool::ClipboardRead => "Read the text on the device's clipboard.",
            LocalTool::ClipboardWrite => "Put text on the device's clipboard.",
            LocalTool::Sensor => "Read one of the device's sensors. Returns its value as JSON.",
            LocalTool::Location => "The device's current location (latitude, longitude, accuracy in metres).",
        }
    }

    fn parameters(self, sensors: &[String]) -> Value {
        let path = json!({"type": "string", "description": "A file's path, relative to the shared folder"});
        match self {
            LocalTool::FileRead => {
                json!({"type": "object", "properties": {"path": path}, "required": ["path"]})
            }
            LocalTool::FileWrite => json!({"type": "object", "properties": {
                "path": path, "content": {"type": "string", "description": "The whole new text of the file"}
            }, "required": ["path", "content"]}),
            LocalTool::FileList => json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "A folder relative to the shared folder; empty or . for the shared folder itself"}
            }}),
            LocalTool::ClipboardRead | LocalTool::Location => {
                json!({"type": "object", "properties": {}})
            }
            LocalTool::ClipboardWrite => json!({"type": "object", "properties": {
                "text": {"type": "string"}
            }, "required": ["text"]}),
            LocalTool::Sensor => json!({"type": "object", "properties": {
                "name": {"type": "string", "enum": sensors}
            }, "required": ["name"]}),
        }
    }
}

impl std::str::FromStr for LocalTool {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::from_name(s).ok_or_else(|| {
            let names: Vec<_> = Self::ALL.iter().map(|t| t.name()).collect();
            format!("no tool {s:?}; there are {}", names.join(", "))
        })
    }
}

/// The host's clipboard.
pub trait Clipboard: Send + Sync {
    fn read(&self) -> Result<String, String>;
    fn write(&self, text: &str) -> Result<(), String>;
}

/// The host's sensors, by name (`"battery"`, `"ambient_light"`, ...).
pub trait Sensors: Send + Sync {
    fn names(&self) -> Vec<String>;
    fn read(&self, name: &str) -> Result<Value, String>;
}

/// The host's location service.
pub trait Location: Send + Sync {
    /// `{"latitude", "longitude", "accuracy_m"}` or what the platform gives.
    fn locate(&self) -> Result<Value, String>;
}

/// The tools a model may use, and what backs them. Nothing is granted by default.
#[derive(Clone, Default)]
pub struct LocalTools {
    pub allow: BTreeSet<LocalTool>,
    pub sandbox: Option<Sandbox>,
    pub clipboard: Option<Arc<dyn Clipboard>>,
    pub sensors: Option<Arc<dyn Sensors>>,
    pub location: Option<Arc<dyn Location>>,
}

impl LocalTools {
    /// The file tools in `allow`, confined to `sandbox`.
    pub fn files(sandbox: Sandbox, allow: impl IntoIterator<Item = LocalTool>) -> Self {
        Self {
            allow: allow.into_iter().collect(),
            sandbox: Some(sandbox),
            ..Self::default()
        }
    }

    /// The tools granted and backed, in a stable order.
    pub fn available(&self) -> Vec<LocalTool> {
        LocalTool::ALL
            .into_iter()
            .filter(|t| self.allow.contains(t))
            .filter(|t| match t {
                LocalTool::FileRead | LocalTool::FileWrite | LocalTool::FileList => {
                    self.sandbox.is_some()
                }
                LocalTool::ClipboardRead | LocalTool::ClipboardWrite => self.clipboard.is_some(),
                LocalTool::Sensor => self.sensors.is_some(),
                LocalTool::Location => self.location.is_some(),
            })
            .collect()
    }

    /// What a model is told about the available tools: OpenAI `tools` entries.
    pub fn definitions(&self) -> Vec<Value> {
        let sensors = self.sensors.as_ref().map(|s| s.names()).unwrap_or_default();
        self.available()
            .into_iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name(),
                    "description": t.description(),
                    "parameters": t.parameters(&sensors),
                }})
            })
            .collect()
    }

    /// Whether `name` is an available tool.
    pub fn has(&self, name: &str) -> bool {
        LocalTool::from_name(name).is_some_and(|t| self.available().contains(&t))
    }

    /// Runs the call `name(arguments)`; an `Err` is a tool error for the model to read.
    pub fn call(&self, name: &str, arguments: &Value) -> Result<String, String> {
        let tool = LocalTool::from_name(name)
            .filter(|t| self.available().contains(t))
            .ok_or_else(|| format!("there is no tool {name:?} here"))?;
        let arg = |key: &str| -> Result<&str, String> {
            arguments
                .get(key)
                .and_then(Value::as_str)
                .ok_or_else(|| format!("{name}: the string argument {key:?} is missing"))
        };
        let sandbox = || self.sandbox.as_ref().expect("available() checked it");
        match tool {
            LocalTool::FileRead => sandbox().read(arg("path")?),
            LocalTool::FileWrite => {
                let path = arg("path")?;
                let n = sandbox().write(path, arg("content")?)?;
                Ok(json!({"path": path, "bytes_written": n}).to_string())
            }
            LocalTool::FileList => {
                let path = arguments.get("path").and_then(Value::as_str).unwrap_or("");
                Ok(sandbox().list(path)?.to_string())
            }
            LocalTool::ClipboardRead => self.clipboard.as_ref().expect("available").read(),
            LocalTool::ClipboardWrite => {
                let text = arg("text")?;
                self.clipboard.as_ref().expect("available").write(text)?;
                Ok(json!({"bytes_written": text.len()}).to_string())
            }
            LocalTool::Sensor => {
                let sensors = self.sensors.as_ref().expect("available");
                let which = arg("name")?;
                if !sensors.names().iter().any(|n| n == which) {
                    return Err(format!(
                        "no sensor {which:?}; there are {:?}",
                        sensors.names()
                    ));
                }
                Ok(sensors.read(which)?.to_string())
            }
            LocalTool::Location => Ok(self
                .location
                .as_ref()
                .expect("available")
                .locate()?
                .to_string()),
        }
    }
}

impl fmt::Debug for LocalTools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalTools")
            .field("allow", &self.allow)
            .field("sandbox", &self.sandbox.as_ref().map(|s| s.root()))
            .field("clipboard", &self.clipboard.is_some())
            .field("sensors", &self.sensors.is_some())
            .field("location", &self.location.is_some())
            .finish()
    }
}
