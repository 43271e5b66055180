//! `hanzo-engine list / show / rm`: the models in the store.

use crate::store::{human_bytes, info, Store};
use anyhow::Result;
use serde_json::json;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct StoreDir {
    /// The store directory (default: HANZO_MODELS_DIR, else ~/.hanzo/models).
    #[arg(long, value_name = "DIR")]
    pub model_dir: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub dir: StoreDir,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct ShowArgs {
    /// A model name in the store, or a path.
    pub name: String,
    #[command(flatten)]
    pub dir: StoreDir,
    /// Also print every GGUF metadata entry.
    #[arg(long)]
    pub verbose: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct RmArgs {
    /// The model names to remove.
    #[arg(required = true)]
    pub names: Vec<String>,
    #[command(flatten)]
    pub dir: StoreDir,
}

pub fn list(args: ListArgs) -> Result<()> {
    let store = Store::open(args.dir.model_dir.as_deref())?;
    let mut rows = Vec::new();
    for e in store.list()? {
        let path = e.model_path();
        // A model whose header cannot be read is still listed (so it can be removed).
        let i = info::read(&path, false).unwrap_or_default();
        rows.push(json!({
            "name": e.manifest.name,
            "architecture": i.architecture,
            "parameters": i.parameters,
            "quantization": i.quantization,
            "size": e.size(),
            "path": path,
            "source": e.manifest.source,
            "pulled_at": e.manifest.pulled_at,
        }));
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    if rows.is_empty() {
        eprintln!(
            "no models in {} (add one with `hanzo-engine pull`)",
            store.root().display()
        );
        return Ok(());
    }
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            [
                r["name"].as_str().unwrap_or("").to_string(),
                r["architecture"].as_str().unwrap_or("").to_string(),
                human_count(r["parameters"].as_u64().unwrap_or(0)),
                r["quantization"].as_str().unwrap_or("").to_string(),
                human_bytes(r["size"].as_u64().unwrap_or(0)),
                r["path"].as_str().unwrap_or("").to_string(),
            ]
        })
        .collect();
    let header = ["NAME", "ARCH", "PARAMS", "QUANT", "SIZE", "PATH"];
    let mut width = header.map(str::len);
    for row in &cells {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |row: [&str; 6]| {
        let mut s = String::new();
        for (i, c) in row.iter().enumerate() {
            if i + 1 == row.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  ", w = width[i]));
            }
        }
        s
    };
    println!("{}", line(header));
    for r in &cells {
        println!("{}", line(r.each_ref().map(String::as_str)));
    }
    Ok(())
}

pub fn show(args: ShowArgs) -> Result<()> {
    let store = Store::open(args.dir.model_dir.as_deref())?;
    let as_path = PathBuf::from(&args.name);
    let (name, path, manifest) = if as_path.exists() {
        (args.name.clone(), as_path, None)
    } else {
        let e = store.find(&args.name)?;
        (e.manifest.name.clone(), e.model_path(), Some(e.manifest))
    };
    let i = info::read(&path, args.verbose)?;
    if args.json {
        let mut v = serde_json::to_value(&i)?;
        v["name"] = json!(name);
        v["path"] = json!(path);
        if let Some(m) = &manifest {
            v["manifest"] = serde_json::to_value(m)?;
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("{name}");
    println!("  path          {}", path.display());
    if let Some(m) = &manifest {
        println!("  source        {}", m.source);
        println!("  pulled at     {}", m.pulled_at);
    }
    println!("  format        {}", i.format);
    println!("  architecture  {}", i.architecture);
    println!(
        "  parameters    {} ({})",
        human_count(i.parameters),
        i.parameters
    );
    println!("  quantization  {}", i.quantization);
    if let Some(c) = i.context_length {
        println!("  context       {c}");
    }
    if let Some(t) = &i.tokenizer {
        match i.vocab_size {
            Some(v) => println!("  tokenizer     {t}, {v} tokens"),
            None => println!("  tokenizer     {t}"),
        }
    }
    println!("  tensors       {}", i.tensors);
    for (ty, s) in &i.tensor_types {
        println!(
            "    {ty:<8} {:>5} tensors  {:>14} parameters  {:>10}",
            s.tensors,
            s.parameters,
            human_bytes(s.bytes)
        );
    }
    if let Some(m) = &manifest {
        println!("  files");
        for f in &m.files {
            println!(
                "    {}  {}  sha256 {}{}",
                f.name,
                human_bytes(f.size),
                f.sha256,
                if f.verified { " (verified)" } else { "" }
            );
        }
    }
    match &i.chat_template {
        Some(t) => println!("  chat template\n{}", indent(t, "    ")),
        None => println!("  chat template (none)"),
    }
    if let Some(md) = &i.metadata {
        println!("  metadata");
        for (k, v) in md {
            println!("    {k} = {v}");
        }
    }
    Ok(())
}

pub fn rm(args: RmArgs) -> Result<()> {
    let store = Store::open(args.dir.model_dir.as_deref())?;
    for name in &args.names {
        let e = store.remove(name)?;
        eprintln!("removed {} ({})", e.manifest.name, human_bytes(e.size()));
    }
    Ok(())
}

/// 268098176 -> "268.1M".
fn human_count(n: u64) -> String {
    match n {
        n if n >= 1_000_000_000 => format!("{:.1}B", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.1}M", n as f64 / 1e6),
        n if n >= 1_000 => format!("{:.1}K", n as f64 / 1e3),
        n => n.to_string(),
    }
}

fn indent(text: &str, pad: &str) -> String {
    text.lines()
        .map(|l| format!("{pad}{l}"))
        .collect::<Vec<_>>()
        .join("\n")
}
