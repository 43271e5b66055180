//! `hanzo-engine bench`: llama-bench's two tests, or with `--parallel` many sequences at
//! once (`bench_parallel`). pp<N>: one forward pass over N prompt
//! tokens (logits for the last only); tg<N>: N single-token decode steps from an empty
//! cache. Random token ids (BOS first), one untimed warm-up run, then REPS timed runs;
//! the reported speed is the median. Both measure the steady state a session reaches after
//! its first token: one decode step before them repacks the weights that decode reads
//! repacked (`QMatMul`'s `Repacking`), so pp reads them as later prompts do.
//!
//! An embedding model directory (BERT family) gets one test instead, enc<N>: a forward pass
//! of the encoder over one sequence of N tokens (`-p`).
//!
//! With `--lookup` or `--draft-model`, two more rows: greedy generation of N tokens (`-n`)
//! from a real prompt (`--spec-prompt`, a code edit by default) without and with
//! speculative decoding, and the share of drafted tokens kept.

use anyhow::{bail, Context, Result};
use clap::Args as ClapArgs;
use hanzo_transformers::{Cache, LanguageModel, Logits, LoraId};
use rand::{Rng, SeedableRng};
use std::time::Instant;

#[derive(ClapArgs, Debug)]
pub struct Args {
    #[command(flatten)]
    pub model: super::ModelArgs,
    /// Prompt tokens for the pp test (0 = skip).
    #[arg(short = 'p', long = "n-prompt", default_value_t = 512)]
    pub n_prompt: usize,
    /// Generated tokens for the tg test (0 = skip).
    #[arg(short = 'n', long = "n-gen", default_value_t = 128)]
    pub n_gen: usize,
    /// Timed repetitions per test.
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    pub reps: usize,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Instead of pp/tg: N sequences of -p prompt tokens then -n generated tokens, run
    /// together (a comma-separated list runs each N).
    #[arg(long, value_name = "N[,N...]", value_delimiter = ',')]
    pub parallel: Vec<usize>,
    #[command(flatten)]
    pub spec: super::speculation::SpecArgs,
    /// The chat message the speculative rows answer (default: a code edit whose reply
    /// repeats most of its prompt).
    #[arg(long, value_name = "TEXT")]
    pub spec_prompt: Option<String>,
}

pub(super) struct Row {
    pub test: String,
    pub tokens: usize,
    pub samples: Vec<f64>,
    /// Drafted tokens kept over drafted tokens (speculative rows).
    pub acceptance: Option<f64>,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn tokens(
    model: &dyn LanguageModel,
    bos: Option<u32>,
    n: usize,
    rng: &mut rand::rngs::StdRng,
) -> Vec<u32> {
    let vocab = model.info().vocab_size as u32;
    let mut t: Vec<u32> = (0..n).map(|_| rng.gen_range(0..vocab)).collect();
    if let (Some(b), Some(first)) = (bos, t.first_mut()) {
        *first = b;
    }
    t
}

/// A cache for `n` positions that runs with the pipeline's adapters.
fn cache(model: &dyn LanguageModel, lora: Option<LoraId>, n: usize) -> Cache {
    let mut cache = model.new_cache(n);
    cache.set_lora(lora);
    cache
}

fn pp(model: &dyn LanguageModel, lora: Option<LoraId>, toks: &[u32]) -> Result<f64> {
    let mut cache = cache(model, lora, toks.len());
    let t0 = Instant::now();
    for chunk in toks.chunks(hanzo_transformers::pipeline::PREFILL_CHUNK) {
        model.forward(chunk, &mut cache, Logits::Last)?;
    }
    Ok(toks.len() as f64 / t0.elapsed().as_secs_f64())
}

fn tg(model: &dyn LanguageModel, lora: Option<LoraId>, toks: &[u32]) -> Result<f64> {
    let mut cache = cache(model, lora, toks.len());
    let t0 = Instant::now();
    for &t in toks {
        model.forward(&[t], &mut cache, Logits::Last)?;
    }
    Ok(toks.len() as f64 / t0.elapsed().as_secs_f64())
}

pub fn run(mut a: Args) -> Result<()> {
    a.model.model = crate::store::resolve_model(&a.model.model)?;
    if a.reps == 0 {
        bail!("--repetitions must be at least 1");
    }
    if hanzo_transformers::Embedder::is_encoder_dir(&a.model.model) {
        return encoder(&a);
    }
    let mut p = super::load(&a.model)?;
    a.spec.attach(&mut p)?;
    super::settle_weights(&p)?;
    let model = p.model.as_ref();
    let threads = rayon::current_num_threads();
    let kernels = hanzo_ml::cpu::features::isa().name();
    eprintln!("kernels: {kernels}, {threads} threads");
    if !a.parallel.is_empty() {
        return parallel(&a, model, threads);
    }
    let bos = p.tokenizer.special().bos;
    let lora = p.lora();
    tg(model, lora, &[bos.unwrap_or(0)])?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(1234);
    let mut rows = Vec::new();
    type Test = fn(&dyn LanguageModel, Option<LoraId>, &[u32]) -> Result<f64>;
    for (name, n, f) in [("pp", a.n_prompt, pp as Test), ("tg", a.n_gen, tg as Test)] {
        if n == 0 {
            continue;
        }
        let toks = tokens(model, bos, n, &mut rng);
        f(model, lora, &toks)?; // warm-up: page in the weights
        let samples = (0..a.reps)
            .map(|_| f(model, lora, &toks))
            .collect::<Result<Vec<_>>>()?;
        rows.push(Row {
            test: format!("{name}{n}"),
            tokens: n,
            samples,
            acceptance: None,
        });
    }
    if a.spec.active() && a.n_gen > 0 {
        rows.extend(super::bench_spec::rows(&p, &a)?);
    }
    report(
        &a,
        model.info().architecture.as_str(),
        threads,
        kernels,
        rows,
    )
}

/// `--parallel`: one row per N (see `bench_parallel`), then the memory it took against the
/// computed budget.
fn parallel(a: &Args, model: &dyn LanguageModel, threads: usize) -> Result<()> {
    let base = hanzo_ml::memory::process_memory();
    let mut runs = Vec::new();
    for &n in &a.parallel {
        let r = super::bench_parallel::run(model, n, a.n_prompt, a.n_gen, 1234 + n as u64)?;
        if !a.json {
            eprintln!(
                "parallel {n}: {:.2} generated t/s in total, {:.2} per sequence, time to first token {:.3} s",
                r.total_tokens_per_second, r.tokens_per_second, r.ttft_s
            );
        }
        runs.push(r);
    }
    if a.json {
        let rows: Vec<_> = runs.iter().map(|r| r.json()).collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        println!("| model | threads | parallel | prompt | generated | total t/s | t/s per sequence | TTFT s | prefill t/s |");
        println!("|---|---|---|---|---|---|---|---|---|");
        for r in &runs {
            println!(
                "| {} | {threads} | {} | {} | {} | {:.2} | {:.2} | {:.3} | {:.1} |",
                model.info().architecture,
                r.parallel,
                r.prompt,
                r.generated,
                r.total_tokens_per_second,
                r.tokens_per_second,
                r.ttft_s,
                r.prefill_tokens_per_second
            );
        }
    }
    // Peak memory against what the largest run needed: the loaded process (weights paged
    // in), its KV pool and the activations of its passes.
    if let (Some(base), Some(now), Some(big)) = (
        base,
        hanzo_ml::memory::process_memory(),
        runs.iter().max_by_key(|r| r.kv_bytes),
    ) {
        let rows = hanzo_transformers::pipeline::PREFILL_CHUNK.max(big.parallel);
        let scratch = hanzo_transformers::models::scratch_bytes(model.info(), rows, big.parallel);
        let (loaded, peak) = (base.resident, now.peak);
        let budget = loaded as usize + big.kv_bytes + scratch;
        eprintln!(
            "memory: peak RSS {} MiB; budget {} MiB = loaded {} MiB + KV pool {} MiB + scratch {} MiB ({:.0}% of budget)",
            peak >> 20,
            budget >> 20,
            loaded >> 20,
            big.kv_bytes >> 20,
            scratch >> 20,
            100.0 * peak as f64 / budget as f64
        );
    }
    Ok(())
}

/// enc<N>: the encoder's forward pass over one N-token sequence (no padding).
fn encoder(a: &Args) -> Result<()> {
    let path = &a.model.model;
    let e = hanzo_transformers::Embedder::from_dir(path)
        .with_context(|| format!("cannot load {}", path.display()))?;
    let c = &e.model.config;
    let n = a.n_prompt;
    if n == 0 || n > c.max_position_embeddings {
        bail!(
            "-p {n}: the encoder takes 1 to {} tokens",
            c.max_position_embeddings
        );
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(1234);
    let ids: Vec<u32> = (0..n)
        .map(|_| rng.gen_range(0..c.vocab_size as u32))
        .collect();
    let dev = hanzo_ml::Device::Cpu;
    let ids = hanzo_ml::Tensor::from_vec(ids, (1, n), &dev)?;
    let mask = hanzo_ml::Tensor::ones((1, n), hanzo_ml::DType::U32, &dev)?;
    let forward = || -> Result<f64> {
        let t0 = Instant::now();
        e.model.forward(&ids, &mask)?;
        Ok(n as f64 / t0.elapsed().as_secs_f64())
    };
    let threads = rayon::current_num_threads();
    eprintln!("f32 encoder, {threads} threads");
    forward()?; // warm-up
    let samples = (0..a.reps).map(|_| forward()).collect::<Result<Vec<_>>>()?;
    let rows = vec![Row {
        test: format!("enc{n}"),
        tokens: n,
        samples,
        acceptance: None,
    }];
    report(a, "bert", threads, "f32", rows)
}

/// The table (or with --json the array) of median speeds.
fn report(a: &Args, arch: &str, threads: usize, kernels: &str, rows: Vec<Row>) -> Result<()> {
    if a.json {
        let out: Vec<_> = rows
            .iter()
            .map(|r| {
                let med = median(&mut r.samples.clone());
                serde_json::json!({
                    "model": a.model.model.file_name().map(|f| f.to_string_lossy().into_owned()),
                    "architecture": arch,
                    "test": r.test,
                    "n_tokens": r.tokens,
                    "threads": threads,
                    "kernels": kernels,
                    "repetitions": a.reps,
                    "tokens_per_second": med,
                    "ms_per_run": r.tokens as f64 * 1e3 / med,
                    "samples_tokens_per_second": r.samples,
                    "draft_acceptance": r.acceptance,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        let spec = rows.iter().any(|r| r.acceptance.is_some());
        let (head, rule) = match spec {
            true => (" drafts kept |", "---|"),
            false => ("", ""),
        };
        println!("| model | threads | test | t/s (median) | min | max | ms per run |{head}");
        println!("|---|---|---|---|---|---|---|{rule}");
        for r in &rows {
            let mut s = r.samples.clone();
            let med = median(&mut s);
            let kept = match (spec, r.acceptance) {
                (true, Some(k)) => format!(" {:.0}% |", 100.0 * k),
                (true, None) => " |".into(),
                (false, _) => String::new(),
            };
            println!(
                "| {arch} | {threads} | {} | {med:.2} | {:.2} | {:.2} | {:.2} |{kept}",
                r.test,
                s[0],
                s[s.len() - 1],
                r.tokens as f64 * 1e3 / med
            );
        }
    }
    Ok(())
}
