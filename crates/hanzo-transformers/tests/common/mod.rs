//! Helpers shared by the model tests: fixture paths and the reference data.
#![allow(dead_code)]

use hanzo_transformers::{LanguageModel, Logits};
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../../../../scripts/fixture_path.rs"]
mod fixture_path;
pub use fixture_path::fixture;

pub fn reference_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/reference")
        .join(name)
}

/// A JSON file from tests/reference.
pub fn reference(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(reference_path(name)).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Cosine similarity of a computed vector and a reference one, in f64.
pub fn cosine(a: &[f32], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y).sum();
    let na = a.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    let nb = b.iter().map(|&y| y * y).sum::<f64>().sqrt();
    dot / (na * nb)
}

pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Runs a converter from scripts/ on fixture `id`, writing `out` (a name under the test
/// target's temporary folder), and returns the output path.
pub fn convert_fixture(script: &str, flags: &[&str], id: &str, out: &str) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts")
        .join(script);
    let src = fixture(id);
    let dst = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(out);
    let ok = Command::new("python3")
        .arg(&script)
        .args(flags)
        .args([&src, &dst])
        .status()
        .expect("python3")
        .success();
    assert!(ok, "{} failed", script.display());
    dst
}

/// Runs `scripts/SCRIPT write OUT REFERENCE` (a writer of NumPy-made test weights that
/// fails unless they hash to what `tests/reference/REFERENCE` recorded) into `out`, a name
/// under the test target's temporary folder, and returns the output path.
pub fn write_checked(script: &str, out: &str, reference_name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(out);
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts")
        .join(script);
    let ok = Command::new("python3")
        .arg(&script)
        .arg("write")
        .arg(&dir)
        .arg(reference_path(reference_name))
        .status()
        .expect("python3")
        .success();
    assert!(ok, "{} write failed", script.display());
    dir
}

pub fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best
}

pub fn row(t: &hanzo_ml::Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
}

/// How far a model's logits are from the reference's.
pub struct Drift {
    /// max |Δ| over every logit the reference recorded.
    pub worst: f32,
    /// Root mean square of the 32 teacher-forced steps' |Δ top-1 logit|. With 8-bit
    /// activations a last-bit difference anywhere (summation order, kernel choice) can move a
    /// value across a rounding boundary, so the single worst step is one draw of that noise;
    /// the mean over steps is what a broken kernel would move and a kernel change would not.
    pub rms: f32,
    /// Teacher-forced argmax agreements out of 32.
    pub agree: usize,
}

/// A model's logits against a transformers reference recorded by
/// scripts/reference/transformers_logits.py: every prompt position's argmax, the last
/// position's top-5 and first 8 logits, and 32 teacher-forced greedy steps. Panics if the
/// argmax differs where the reference margin is at least `clear_margin`.
pub fn compare(model: &dyn LanguageModel, reference_name: &str, clear_margin: f64) -> Drift {
    let r = reference(reference_name);
    let prompt = ids(&r["prompt_ids"]);

    // Every prompt position's argmax; the last position's top-5 and first 8 logits.
    let mut cache = model.new_cache(256);
    let all = model.forward(&prompt, &mut cache, Logits::All).unwrap();
    let vocab = all.dims()[all.rank() - 1];
    let all = row(&all);
    let argmaxes: Vec<u32> = all.chunks(vocab).map(|l| argmax(l) as u32).collect();
    assert_eq!(argmaxes, ids(&r["all_positions_argmax"]));
    let last = &all[all.len() - vocab..];
    let mut worst = 0f32;
    for t in r["next_token_top5"].as_array().unwrap() {
        let id = t["id"].as_u64().unwrap() as usize;
        worst = worst.max((last[id] - t["logit"].as_f64().unwrap() as f32).abs());
    }
    let stats = &r["last_position_logits_stats"];
    for (i, want) in stats["first8"].as_array().unwrap().iter().enumerate() {
        worst = worst.max((last[i] - want.as_f64().unwrap() as f32).abs());
    }

    // Teacher-forced along the reference's 32 greedy steps.
    let want_ids = ids(&r["greedy_32_ids"]);
    let top1 = r["greedy_32_step_top1_logit"].as_array().unwrap();
    let margins = r["greedy_32_step_top1_minus_top2"].as_array().unwrap();
    let mut cache = model.new_cache(256);
    let mut logits = row(&model.forward(&prompt, &mut cache, Logits::Last).unwrap());
    let mut agree = 0;
    let mut square_sum = 0f32;
    for (i, &want) in want_ids.iter().enumerate() {
        let margin = margins[i].as_f64().unwrap();
        let ours = argmax(&logits) as u32;
        if ours == want {
            agree += 1;
        } else {
            assert!(
                margin < clear_margin,
                "step {i}: ours {ours}, reference {want} (margin {margin})"
            );
        }
        let step = (logits[want as usize] - top1[i].as_f64().unwrap() as f32).abs();
        worst = worst.max(step);
        square_sum += step * step;
        logits = row(&model.forward(&[want], &mut cache, Logits::Last).unwrap());
    }
    let rms = (square_sum / want_ids.len() as f32).sqrt();
    Drift { worst, rms, agree }
}

/// A model computing in f32 against transformers' f32 logits: every recorded logit within
/// `max`, and the same argmax at all 32 teacher-forced steps. `what` labels the printed line.
pub fn assert_matches_reference(model: &dyn LanguageModel, reference: &str, max: f32, what: &str) {
    let d = compare(model, reference, 0.0);
    eprintln!(
        "{what}: max |Δ logit| {:.4}, {}/32 teacher-forced argmax agree",
        d.worst, d.agree
    );
    assert!(d.worst < max, "{what}: logit drift {}", d.worst);
    assert_eq!(d.agree, 32, "{what}");
}

/// 8-bit activations (and quantized weights) against the same reference: the argmax agrees
/// wherever the reference's margin is at least 0.3, the teacher-forced steps stay within
/// about half a logit on average (SmolLM2: rms 0.28-0.50 with the scalar and AVX2 kernel
/// sets), and no recorded logit moves by more than 2 (the worst single step depends on which
/// kernels ran; see `Drift::rms`).
pub fn assert_tracks_reference(model: &dyn LanguageModel, reference: &str, what: &str) {
    let d = compare(model, reference, 0.3);
    eprintln!(
        "{what}: max |Δ logit| {:.3}, rms {:.3}, {}/32 agree",
        d.worst, d.rms, d.agree
    );
    assert!(d.rms < 0.7, "{what}: rms logit drift {}", d.rms);
    assert!(d.worst < 2.0, "{what}: logit drift {}", d.worst);
}
