//! Many sequences in one forward pass over the paged KV store give what each gives alone.
//!
//! For Gemma 3, SmolLM2 and Qwen2.5: sequences of different prompt lengths join a running
//! batch at different steps (their prompts prefilled beside the others' decode tokens) and
//! decode together. Each step's logits must equal, bit for bit, those of the same sequence
//! run alone through `forward` (fed the solo run's greedy tokens): a batch computes every
//! row with the kernels the sequence's own pass would use (`QMatMul::forward_rows_alone`),
//! so there is no tolerance to state, and the greedy tokens agree.
//!
//! Then the store's bookkeeping under a real model: a prompt whose prefix is cached gives
//! the cold prompt's logits and reports the hit; after everything finishes or is cancelled
//! the pool is whole again; a sequence too long for the pool gets the typed error while the
//! others go on.

mod common;

use common::{argmax, row};
use hanzo_ml::kv::{KvError, PagedKv, SeqId};
use hanzo_ml::quantized::gguf::GgufFile;
use hanzo_transformers::{load_gguf, Error, LanguageModel, Logits, SeqChunk};

/// Solo greedy steps per sequence after its prompt.
const STEPS: usize = 6;

/// `n` prompts of different lengths (12 + 3i tokens: for 16, on both sides of every weight
/// type's GEMM panel threshold, `QMatMul::panels_from`), made of ordinary token ids.
fn prompts(n: usize, vocab: usize) -> Vec<Vec<u32>> {
    (0..n)
        .map(|i| {
            (0..12 + 3 * i)
                .map(|j| (1000 + 37 * i + 101 * j) as u32 % vocab as u32)
                .collect()
        })
        .collect()
}

/// How the batched run sends a prompt.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Prompt {
    /// In one chunk.
    Whole,
    /// In two chunks, each a run of its own: a prompt's numerics depend on its chunks (a
    /// chunk of `QMatMul::panels_from` rows or more takes the GEMM panels, one of 64 or more
    /// the tiled attention), as in llama.cpp, whose batch splits do the same.
    TwoRuns,
    /// In two pieces of one run (`SeqChunk::in_run`), as after a prefix-cache hit: the same
    /// numbers as `Whole`.
    TwoPieces,
}

/// One sequence alone: its greedy tokens and the logits of every step (the prompt's last
/// position, then each generated token's). With `split` the prompt goes in two chunks (see
/// `Prompt::TwoRuns`).
fn solo(model: &dyn LanguageModel, prompt: &[u32], split: bool) -> (Vec<u32>, Vec<Vec<f32>>) {
    let mut cache = model.new_cache(prompt.len() + STEPS + 1);
    let mut rest = prompt;
    if split {
        let (first, second) = prompt.split_at(prompt.len() / 2);
        model.forward(first, &mut cache, Logits::None).unwrap();
        rest = second;
    }
    let mut logits = vec![row(&model.forward(rest, &mut cache, Logits::Last).unwrap())];
    let mut tokens = Vec::new();
    for _ in 0..STEPS {
        let next = argmax(logits.last().unwrap()) as u32;
        tokens.push(next);
        logits.push(row(&model
            .forward(&[next], &mut cache, Logits::Last)
            .unwrap()));
    }
    (tokens, logits)
}

/// Runs `prompts` together, sequence `i` joining at step `join[i]` (its prompt sent as `how`
/// says, a second piece at the next step), each fed the solo run's tokens; returns every
/// sequence's per-step logits.
fn batched(
    model: &dyn LanguageModel,
    prompts: &[Vec<u32>],
    join: &[usize],
    solo_tokens: &[Vec<u32>],
    how: Prompt,
) -> Vec<Vec<Vec<f32>>> {
    let split = how != Prompt::Whole;
    // The run a prompt's piece belongs to: its own, or the whole prompt.
    let piece = |seq, p: &[u32], tokens, logits| match how {
        Prompt::TwoPieces => SeqChunk::new(seq, tokens, logits).in_run(p.len()),
        _ => SeqChunk::new(seq, tokens, logits),
    };
    let mut kv = PagedKv::with_blocks(model.kv_layout(), 4000);
    let free = kv.free_blocks();
    let n = prompts.len();
    let mut seqs: Vec<Option<SeqId>> = vec![None; n];
    let mut done = vec![0usize; n]; // decode tokens fed
    let mut got: Vec<Vec<Vec<f32>>> = vec![Vec::new(); n];
    let last_step = join.iter().max().unwrap() + STEPS + 2;
    for step in 0..last_step {
        let mut chunks = Vec::new();
        let mut who = Vec::new();
        for i in 0..n {
            match seqs[i] {
                None if join[i] == step => {
                    let seq = kv.add_sequence();
                    seqs[i] = Some(seq);
                    let p = &prompts[i];
                    if split {
                        // The first piece now (no logits), the rest next step.
                        chunks.push(piece(seq, p, &p[..p.len() / 2], Logits::None));
                    } else {
                        chunks.push(SeqChunk::new(seq, p, Logits::Last));
                        who.push(i);
                    }
                }
                Some(seq) if split && kv.len(seq).unwrap() == prompts[i].len() / 2 => {
                    let p = &prompts[i];
                    chunks.push(piece(seq, p, &p[p.len() / 2..], Logits::Last));
                    who.push(i);
                }
                Some(seq) if done[i] < STEPS && !got[i].is_empty() => {
                    let next = &solo_tokens[i][done[i]..done[i] + 1];
                    chunks.push(SeqChunk::new(seq, next, Logits::Last));
                    done[i] += 1;
                    who.push(i);
                }
                _ => {}
            }
        }
        if chunks.is_empty() {
            continue;
        }
        let logits = row(&model.forward_batch(&chunks, &mut kv).unwrap());
        let vocab = model.info().vocab_size;
        assert_eq!(logits.len(), who.len() * vocab);
        for (i, l) in who.iter().zip(logits.chunks(vocab)) {
            got[*i].push(l.to_vec());
        }
        // Finished sequences leave at once; their blocks go back to the pool.
        for i in 0..n {
            if let Some(seq) = seqs[i] {
                if got[i].len() == STEPS + 1 {
                    kv.release(seq).unwrap();
                    seqs[i] = None;
                    got[i].push(Vec::new()); // marks it finished
                }
            }
        }
    }
    assert_eq!(kv.free_blocks(), free, "every block back in the pool");
    got.into_iter()
        .map(|mut g| {
            g.pop();
            g
        })
        .collect()
}

fn check_batches(fixture: &str) {
    let model = load_gguf(&GgufFile::open(common::fixture(fixture)).unwrap()).unwrap();
    let model = model.as_ref();
    let prompts = prompts(16, model.info().vocab_size);
    // The first decode step repacks weights for the matvec kernels, which changes the
    // kernels a prompt runs through too: every run below starts from the repacked model.
    solo(model, &prompts[0], false);
    let solos: Vec<_> = prompts.iter().map(|p| solo(model, p, false)).collect();
    let split_solos: Vec<_> = prompts[..3].iter().map(|p| solo(model, p, true)).collect();
    let runs = [
        (1, Prompt::Whole),
        (3, Prompt::Whole),
        (3, Prompt::TwoRuns),
        (16, Prompt::TwoPieces),
        (16, Prompt::Whole),
    ];
    for (n, how) in runs {
        // Joining at steps 0, 1, 2, ... (three at a time for 16).
        let join: Vec<usize> = (0..n).map(|i| if n > 3 { i / 3 } else { i }).collect();
        let solos = match how {
            Prompt::TwoRuns => &split_solos,
            Prompt::Whole | Prompt::TwoPieces => &solos,
        };
        let tokens: Vec<Vec<u32>> = solos[..n].iter().map(|s| s.0.clone()).collect();
        let got = batched(model, &prompts[..n], &join, &tokens, how);
        for (i, steps) in got.iter().enumerate() {
            let want = &solos[i].1;
            assert_eq!(steps.len(), want.len(), "{fixture} n {n} seq {i}");
            for (s, (g, w)) in steps.iter().zip(want).enumerate() {
                let d = g
                    .iter()
                    .zip(w)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                assert!(
                    g == w,
                    "{fixture}: {n} sequences, prompts {how:?}, seq {i} step {s}: max |Δ logit| {d}"
                );
            }
        }
    }
}
#[test]
fn gemma3_batches_give_the_solo_logits() {
    check_batches("gemma3");
}

#[test]
fn smollm2_batches_give_the_solo_logits() {
    check_batches("smollm2");
}

#[test]
fn qwen2_batches_give_the_solo_logits() {
    check_batches("qwen2");
}

/// Logits of `prompt` (last position) through `kv`, the sequence left in the store.
fn prefill(
    model: &dyn LanguageModel,
    kv: &mut PagedKv,
    prompt: &[u32],
) -> (SeqId, Vec<f32>, usize) {
    let (seq, hit) = kv.add_sequence_with_prefix(prompt);
    let chunk = SeqChunk::new(seq, &prompt[hit..], Logits::Last).in_run(prompt.len());
    (seq, row(&model.forward_batch(&[chunk], kv).unwrap()), hit)
}

#[test]
fn a_cached_prefix_gives_the_cold_logits_and_the_pool_comes_back_whole() {
    // Gemma 3: full and sliding-window layers (window 512) side by side.
    let model = load_gguf(&GgufFile::open(common::fixture("gemma3")).unwrap()).unwrap();
    let model = model.as_ref();
    let vocab = model.info().vocab_size;
    let system: Vec<u32> = (0..40).map(|j| (500 + 97 * j) % vocab as u32).collect();
    let with = |tail: &[u32]| [system.as_slice(), tail].concat();
    let (a, b) = (with(&[7, 8, 9, 10, 11]), with(&[300, 301, 302]));

    // Cold: a fresh store for each prompt, which goes in one chunk.
    let cold = |p: &[u32]| {
        let mut kv = PagedKv::with_blocks(model.kv_layout(), 200);
        let chunk = SeqChunk::new(kv.add_sequence(), p, Logits::Last);
        row(&model.forward_batch(&[chunk], &mut kv).unwrap())
    };
    let (cold_a, cold_b) = (cold(&a), cold(&b));

    let mut kv = PagedKv::with_blocks(model.kv_layout(), 200);
    let free = kv.free_blocks();
    let (sa, la, hit) = prefill(model, &mut kv, &a);
    assert!(hit == 0 && la == cold_a);
    // The second prompt shares the first 32 positions (two whole blocks of 16).
    let (sb, lb, hit) = prefill(model, &mut kv, &b);
    assert_eq!(hit, 32);
    assert_eq!(kv.stats().prefix_hit, 32);
    // The rest of the prompt takes the kernels of the whole prompt (43 positions: Q4_K's
    // panels for 11 rows), and gives the same floats.
    assert!(
        lb == cold_b,
        "cached prefix logits differ from the cold ones"
    );
    kv.release(sa).unwrap();
    kv.release(sb).unwrap();
    assert_eq!(kv.free_blocks(), free);

    // Enough other work to evict the cached blocks; the prompt is then computed again.
    let other: Vec<u32> = (0..150).map(|j| (900 + 13 * j) % vocab as u32).collect();
    let (so, _, _) = prefill(model, &mut kv, &other);
    kv.release(so).unwrap();
    let (sb, lb, hit) = prefill(model, &mut kv, &b);
    assert!(hit == 0 && lb == cold_b);

    // A sequence the pool cannot hold fails with the typed error; the one running goes on.
    let long: Vec<u32> = (0..3000).map(|j| (11 * j) % vocab as u32).collect();
    let sl = kv.add_sequence();
    let err = model
        .forward_batch(&[SeqChunk::new(sl, &long, Logits::Last)], &mut kv)
        .unwrap_err();
    assert!(
        matches!(err, Error::Kv(KvError::OutOfBlocks { seq, .. }) if seq == sl),
        "{err}"
    );
    assert_eq!(kv.len(sl).unwrap(), 0);
    let next = argmax(&lb) as u32;
    let next = [next];
    let step = SeqChunk::new(sb, &next, Logits::Last);
    model.forward_batch(&[step], &mut kv).unwrap();
    kv.release(sl).unwrap();
    kv.release(sb).unwrap();
    assert_eq!(kv.free_blocks(), free);
}
