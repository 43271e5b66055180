//! Cloud answers on disk, keyed by the request's canonical form (its JSON body as sent:
//! model, messages, tools, sampling), bounded in bytes, least recently used first out.

use ring::digest::{digest, SHA256};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

pub(crate) struct Cache {
    dir: PathBuf,
    max_bytes: u64,
}

/// A kept answer.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Answer {
    pub text: String,
    /// `stop`, `length`, ... as the cloud said.
    pub finish: String,
    pub completion_tokens: usize,
}

/// `v` with every object's keys in sorted order: one text per request, however it was built.
fn canonical(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), canonical(&m[k])))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(canonical).collect()),
        v => v.clone(),
    }
}

impl Cache {
    pub fn new(dir: &Path, max_bytes: u64) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            max_bytes,
        })
    }

    fn path(&self, request: &Value) -> PathBuf {
        let key = digest(&SHA256, canonical(request).to_string().as_bytes());
        let hex: String = key.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        self.dir.join(format!("{hex}.json"))
    }

    /// The answer kept for `request`, if any (and it becomes the most recently used).
    pub fn get(&self, request: &Value) -> Option<Answer> {
        let path = self.path(request);
        let v: Value = serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
        // A different request with the same digest is not a hit.
        if v.get("request") != Some(request) {
            return None;
        }
        let _ = std::fs::File::options()
            .append(true)
            .open(&path)
            .and_then(|f| f.set_modified(std::time::SystemTime::now()));
        Some(Answer {
            text: v["text"].as_str()?.to_string(),
            finish: v["finish"].as_str().unwrap_or("stop").to_string(),
            completion_tokens: v["completion_tokens"].as_u64().unwrap_or(0) as usize,
        })
    }

    /// Keeps `answer`, then drops the least recently used answers over the size limit.
    pub fn put(&self, request: &Value, answer: &Answer) -> std::io::Result<()> {
        let entry = json!({
            "request": request,
            "text": answer.text,
            "finish": answer.finish,
            "completion_tokens": answer.completion_tokens,
        });
        let bytes = entry.to_string().into_bytes();
        if bytes.len() as u64 > self.max_bytes {
            return Ok(());
        }
        let path = self.path(request);
        let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
        std::fs::write(&tmp, &bytes)?;
        std::fs::rename(&tmp, &path)?;
        self.trim()
    }

    fn trim(&self) -> std::io::Result<()> {
        let mut entries = Vec::new();
        for e in std::fs::read_dir(&self.dir)? {
            let e = e?;
            let meta = e.metadata()?;
            if meta.is_file() && e.path().extension().is_some_and(|x| x == "json") {
                entries.push((meta.modified()?, meta.len(), e.path()));
            }
        }
        let mut total: u64 = entries.iter().map(|e| e.1).sum();
        entries.sort();
        for (_, len, path) in entries {
            if total <= self.max_bytes {
                break;
            }
            std::fs::remove_file(&path)?;
            total -= len;
        }
        Ok(())
    }

    /// Bytes kept now.
    #[cfg(test)]
    fn bytes(&self) -> u64 {
        std::fs::read_dir(&self.dir)
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_kept_by_request_and_the_oldest_go_first() {
        let dir = std::env::temp_dir().join(format!("hanzo-cloud-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cache = Cache::new(&dir, 1000).unwrap(); // three answers of about 300 bytes
        let req = |i: usize| json!({"model": "m", "messages": [{"role": "user", "content": format!("q{i}")}]});
        let answer = |i: usize| Answer {
            text: format!("answer {i} ").repeat(20),
            finish: "stop".into(),
            completion_tokens: 20,
        };
        assert_eq!(cache.get(&req(0)), None);
        for i in 0..5 {
            cache.put(&req(i), &answer(i)).unwrap();
            // Distinct modification times for the LRU order.
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(cache.bytes() <= 1000, "{} bytes kept", cache.bytes());
        assert_eq!(cache.get(&req(4)), Some(answer(4)));
        assert_eq!(cache.get(&req(0)), None, "the oldest was not dropped");
        // The same request in another key order is the same request.
        let reordered: Value = serde_json::from_str(
            r#"{"messages": [{"content": "q4", "role": "user"}], "model": "m"}"#,
        )
        .unwrap();
        assert_eq!(cache.get(&reordered), Some(answer(4)));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
