//! `hanzo-engine tokenize`: token ids of a text as one JSON array.

use anyhow::{Context, Result};
use clap::Args as ClapArgs;
use hanzo_ml::quantized::gguf::GgufFile;
use hanzo_transformers::Tokenizer;
use std::path::PathBuf;

#[derive(ClapArgs, Debug)]
pub struct Args {
    /// A model in the store, a GGUF file, or a model directory with tokenizer.json.
    #[arg(short, long)]
    pub model: PathBuf,
    /// Do not add BOS even if the model asks for it.
    #[arg(long)]
    pub no_bos: bool,
    /// Treat special-token texts such as <start_of_turn> as plain text.
    #[arg(long)]
    pub no_parse_special: bool,
    /// Also print each token's piece, one per line, on stderr.
    #[arg(long)]
    pub show: bool,
    pub text: String,
}

pub fn run(mut a: Args) -> Result<()> {
    a.model = crate::store::resolve_model(&a.model)?;
    let tok = if a.model.is_dir() {
        Tokenizer::from_hf_dir(&a.model)?
    } else {
        let file = GgufFile::open(&a.model)
            .with_context(|| format!("cannot open {}", a.model.display()))?;
        Tokenizer::from_gguf(&file)?
    };
    let ids = tok.encode(&a.text, !a.no_bos, !a.no_parse_special);
    if a.show {
        for &id in &ids {
            eprintln!("{id:>7} {:?}", tok.piece(id));
        }
    }
    println!("{}", serde_json::to_string(&ids)?);
    Ok(())
}
