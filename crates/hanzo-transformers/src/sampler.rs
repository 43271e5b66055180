//! Next-token sampling: repetition / presence / frequency penalties, then top-k, top-p and
//! min-p filtering, temperature and a seeded draw. Temperature 0 is greedy (argmax after
//! penalties). The same seed and inputs always give the same tokens.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;

#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 = greedy.
    pub temperature: f32,
    /// 0 = off.
    pub top_k: usize,
    /// 1 = off.
    pub top_p: f32,
    /// 0 = off: drop tokens whose probability is below `min_p` × the top probability.
    pub min_p: f32,
    /// 1 = off (llama.cpp `--repeat-penalty`): logits of recent tokens divided (if positive)
    /// or multiplied (if negative) by it.
    pub repeat_penalty: f32,
    /// How many recent tokens the penalties look at (0 = all).
    pub repeat_last_n: usize,
    /// OpenAI `presence_penalty`: subtracted once from every recent token's logit.
    pub presence_penalty: f32,
    /// OpenAI `frequency_penalty`: subtracted per occurrence.
    pub frequency_penalty: f32,
    /// OpenAI `logit_bias`: added to these tokens' logits before anything else.
    pub logit_bias: Vec<(u32, f32)>,
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            logit_bias: Vec::new(),
            seed: 0,
        }
    }
}

impl SamplingParams {
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            ..Self::default()
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        let bad = |what: &str| Err(what.to_string());
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return bad("temperature must be a finite number >= 0");
        }
        if !(0.0..=1.0).contains(&self.top_p) {
            return bad("top_p must be in [0, 1]");
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad("min_p must be in [0, 1]");
        }
        if !(self.repeat_penalty > 0.0 && self.repeat_penalty.is_finite()) {
            return bad("repeat_penalty must be > 0");
        }
        if !self.presence_penalty.is_finite() || !self.frequency_penalty.is_finite() {
            return bad("penalties must be finite");
        }
        if self.logit_bias.iter().any(|(_, b)| !b.is_finite()) {
            return bad("logit_bias values must be finite");
        }
        Ok(())
    }
}

pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
    history: Vec<u32>,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Self {
        let rng = StdRng::seed_from_u64(params.seed);
        Self {
            params,
            rng,
            history: Vec::new(),
        }
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Records tokens the penalties should see (the prompt, if desired, and each sample).
    pub fn observe(&mut self, tokens: &[u32]) {
        self.history.extend_from_slice(tokens);
    }

    /// Picks the next token from `logits` (one row, vocabulary-sized) and records it.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        let logits = self.adjusted(logits);
        let tok = if self.params.temperature <= 0.0 {
            argmax(&logits)
        } else {
            let (ids, probs) = self.distribution(&logits);
            let r: f64 = self.rng.gen();
            pick(&ids, &probs, r)
        };
        self.history.push(tok);
        tok
    }

    /// A draft model's proposal: a token drawn from `logits` (the draft's row) as `sample`
    /// would draw it, with the distribution it was drawn from, for
    /// [`verify_against`](Self::verify_against). Greedy: the argmax, certain. Nothing is
    /// recorded: the target's check records what is kept.
    pub fn propose(&mut self, logits: &[f32]) -> (u32, Vec<(u32, f64)>) {
        let logits = self.adjusted(logits);
        if self.params.temperature <= 0.0 {
            let tok = argmax(&logits);
            return (tok, vec![(tok, 1.0)]);
        }
        let (ids, probs) = self.distribution(&logits);
        let r: f64 = self.rng.gen();
        let tok = pick(&ids, &probs, r);
        (tok, ids.into_iter().zip(probs).collect())
    }

    /// Speculative decoding's check of a drafted token proposed with certainty (as a prompt
    /// lookup proposes): [`verify_against`](Self::verify_against) with all of the draft's
    /// probability on `draft`.
    pub fn verify(&mut self, logits: &[f32], draft: u32) -> (u32, bool) {
        self.verify_against(logits, draft, &[(draft, 1.0)])
    }

    /// Speculative decoding's check of `draft`, drawn from the distribution `q` (token,
    /// probability; tokens absent have none): the token to keep at this position, and
    /// whether it is the draft. Greedy: the argmax, which is the draft or not. Sampled, with
    /// p the distribution `sample` draws from: the draft with probability min(1, p/q), else
    /// a draw from max(0, p - q) renormalised, so that each token comes out with exactly its
    /// probability p whatever q is (the rule of speculative sampling). Records the token
    /// kept, as `sample` does.
    pub fn verify_against(&mut self, logits: &[f32], draft: u32, q: &[(u32, f64)]) -> (u32, bool) {
        let logits = self.adjusted(logits);
        let tok = if self.params.temperature <= 0.0 {
            argmax(&logits)
        } else {
            let (ids, mut probs) = self.distribution(&logits);
            let p = ids
                .iter()
                .position(|&t| t == draft)
                .map_or(0.0, |i| probs[i]);
            let q_of = |t: u32| q.iter().find(|e| e.0 == t).map_or(0.0, |e| e.1);
            // A draft its own distribution gives no weight is treated as certain.
            let q_draft = match q_of(draft) {
                w if w > 0.0 => w,
                _ => 1.0,
            };
            let r: f64 = self.rng.gen();
            if r < p / q_draft {
                draft
            } else {
                // The residual max(0, p - q); only tokens p can give have any. q as a
                // dense row over the ids it names.
                let mut dense = vec![0f64; q.iter().map(|e| e.0 as usize + 1).max().unwrap_or(0)];
                for &(t, w) in q {
                    dense[t as usize] += w;
                }
                for (&t, p) in ids.iter().zip(probs.iter_mut()) {
                    *p = (*p - dense.get(t as usize).copied().unwrap_or(0.0)).max(0.0);
                }
                let rest: f64 = probs.iter().sum();
                if rest <= 0.0 {
                    draft
                } else {
                    probs.iter_mut().for_each(|q| *q /= rest);
                    let r: f64 = self.rng.gen();
                    pick(&ids, &probs, r)
                }
            }
        };
        self.history.push(tok);
        (tok, tok == draft)
    }

    /// `logits` with the bias and the penalties applied.
    fn adjusted(&self, logits: &[f32]) -> Vec<f32> {
        let mut logits = logits.to_vec();
        for &(t, b) in &self.params.logit_bias {
            if let Some(l) = logits.get_mut(t as usize) {
                *l += b;
            }
        }
        self.apply_penalties(&mut logits);
        logits
    }

    fn apply_penalties(&self, logits: &mut [f32]) {
        let p = &self.params;
        if p.repeat_penalty == 1.0 && p.presence_penalty == 0.0 && p.frequency_penalty == 0.0 {
            return;
        }
        let recent = match p.repeat_last_n {
            0 => &self.history[..],
            n => &self.history[self.history.len().saturating_sub(n)..],
        };
        let mut counts: HashMap<u32, u32> = HashMap::new();
        for &t in recent {
            *counts.entry(t).or_default() += 1;
        }
        for (&t, &c) in &counts {
            let Some(l) = logits.get_mut(t as usize) else {
                continue;
            };
            if *l > 0.0 {
                *l /= p.repeat_penalty;
            } else {
                *l *= p.repeat_penalty;
            }
            *l -= c as f32 * p.frequency_penalty + p.presence_penalty;
        }
    }

    /// The tokens a draw can give and their probabilities: top-k, top-p and min-p applied,
    /// then temperature.
    fn distribution(&self, logits: &[f32]) -> (Vec<u32>, Vec<f64>) {
        let p = &self.params;
        // Candidates sorted by logit, best first (ties: lower id first, for determinism).
        let mut cand: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .filter(|(_, l)| l.is_finite())
            .map(|(i, &l)| (i as u32, l))
            .collect();
        if cand.is_empty() {
            return (vec![argmax(logits)], vec![1.0]);
        }
        let by_logit = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if p.top_k > 0 && p.top_k < cand.len() {
            cand.select_nth_unstable_by(p.top_k - 1, by_logit);
            cand.truncate(p.top_k);
        }
        cand.sort_unstable_by(by_logit);
        // Probabilities at temperature 1 decide top-p / min-p (as llama.cpp's chain does
        // with temperature last).
        let probs = softmax(cand.iter().map(|c| c.1), 1.0);
        let mut keep = cand.len();
        if p.top_p < 1.0 {
            let mut cum = 0.0;
            for (i, &q) in probs.iter().enumerate() {
                cum += q;
                if cum >= p.top_p as f64 {
                    keep = keep.min(i + 1);
                    break;
                }
            }
        }
        if p.min_p > 0.0 {
            let floor = probs[0] * p.min_p as f64;
            keep = keep.min(probs.iter().take_while(|&&q| q >= floor).count().max(1));
        }
        cand.truncate(keep.max(1));
        let probs = softmax(cand.iter().map(|c| c.1), p.temperature);
        (cand.into_iter().map(|c| c.0).collect(), probs)
    }
}

/// The token whose cumulative probability first passes `r` (uniform in [0, 1)).
fn pick(ids: &[u32], probs: &[f64], r: f64) -> u32 {
    let mut cum = 0.0;
    for (&id, q) in ids.iter().zip(probs) {
        cum += q;
        if r < cum {
            return id;
        }
    }
    *ids.last().expect("non-empty")
}

fn softmax(logits: impl Iterator<Item = f32> + Clone, temperature: f32) -> Vec<f64> {
    let t = temperature as f64;
    let m = logits.clone().fold(f32::NEG_INFINITY, f32::max) as f64;
    let e: Vec<f64> = logits.map(|l| ((l as f64 - m) / t).exp()).collect();
    let s: f64 = e.iter().sum();
    e.into_iter().map(|x| x / s).collect()
}

/// Natural-log probabilities of a row of logits (softmax at temperature 1, in f64).
pub fn log_softmax(logits: &[f32]) -> Vec<f32> {
    let m = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&l| (l as f64 - m).exp()).sum();
    let log_z = m + sum.ln();
    logits.iter().map(|&l| (l as f64 - log_z) as f32).collect()
}

/// The `n` most likely tokens of a log-probability row, best first (ties: lower id first).
pub fn top_n(logprobs: &[f32], n: usize) -> Vec<(u32, f32)> {
    let mut ids: Vec<(u32, f32)> = logprobs
        .iter()
        .enumerate()
        .map(|(i, &l)| (i as u32, l))
        .collect();
    let by = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    if n > 0 && n < ids.len() {
        ids.select_nth_unstable_by(n - 1, by);
        ids.truncate(n);
    }
    ids.sort_unstable_by(by);
    ids.truncate(n);
    ids
}

/// Index of the largest logit (the first, on ties).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in logits.iter().enumerate() {
        if x > logits[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The probability a plain draw gives each of `logits`' tokens under `params`.
    fn probabilities(params: &SamplingParams, logits: &[f32; 6]) -> [f64; 6] {
        let (ids, probs) = Sampler::new(params.clone()).distribution(logits);
        let mut want = [0f64; 6];
        for (&i, &p) in ids.iter().zip(&probs) {
            want[i as usize] = p;
        }
        want
    }

    /// Each token's frequency in `n` draws within five standard deviations of a binomial
    /// frequency of `want`.
    fn assert_frequencies(counts: &[usize; 6], want: &[f64; 6], n: usize, case: &str) {
        for (t, (&c, &p)) in counts.iter().zip(want).enumerate() {
            let f = c as f64 / n as f64;
            let tol = 5.0 * (p * (1.0 - p) / n as f64).sqrt() + 1e-9;
            assert!((f - p).abs() <= tol, "{case}: token {t} at {f}, want {p}");
        }
    }

    /// Speculative sampling's check leaves each token's probability as a plain draw gives
    /// it, whatever the draft: a likely one, an unlikely one, one the filters remove.
    #[test]
    fn verified_drafts_keep_the_sampled_distribution() {
        let logits = [2.0f32, 1.0, 0.5, -3.0, 0.0, 1.5];
        let params = SamplingParams {
            temperature: 0.7,
            top_k: 5,
            top_p: 1.0,
            min_p: 0.0,
            seed: 7,
            ..SamplingParams::default()
        };
        let want = probabilities(&params, &logits);
        assert_eq!(want[3], 0.0, "top-k leaves out the lowest logit");
        let n = 60_000;
        for draft in [0u32, 2, 3] {
            let mut s = Sampler::new(SamplingParams {
                seed: 11 + draft as u64,
                ..params.clone()
            });
            let mut counts = [0usize; 6];
            for _ in 0..n {
                let (t, kept) = s.verify(&logits, draft);
                assert_eq!(kept, t == draft);
                counts[t as usize] += 1;
            }
            assert_frequencies(&counts, &want, n, &format!("draft {draft}"));
        }
        // Greedy: the argmax, whether it was drafted or not.
        let mut g = Sampler::new(SamplingParams::greedy());
        assert_eq!(g.verify(&logits, 0), (0, true));
        assert_eq!(g.verify(&logits, 5), (0, false));
    }

    /// With a draft drawn from a distribution q of its own (a draft model's), the check
    /// still gives each token exactly its probability p: q close to p, q far from it, q
    /// weighting a token the filters remove.
    #[test]
    fn drafts_from_a_second_distribution_keep_the_sampled_distribution() {
        let logits = [2.0f32, 1.0, 0.5, -3.0, 0.0, 1.5];
        let params = SamplingParams {
            temperature: 0.9,
            top_k: 5,
            top_p: 1.0,
            min_p: 0.0,
            seed: 3,
            ..SamplingParams::default()
        };
        let want = probabilities(&params, &logits);
        let qs: [[f64; 6]; 3] = [
            [0.35, 0.15, 0.1, 0.0, 0.1, 0.3],
            [0.05, 0.05, 0.5, 0.0, 0.3, 0.1],
            [0.1, 0.1, 0.1, 0.4, 0.2, 0.1],
        ];
        let n = 60_000;
        let mut draws = StdRng::seed_from_u64(99);
        for (k, q) in qs.iter().enumerate() {
            let q_sparse: Vec<(u32, f64)> = q
                .iter()
                .enumerate()
                .filter(|e| *e.1 > 0.0)
                .map(|(i, &w)| (i as u32, w))
                .collect();
            let ids: Vec<u32> = q_sparse.iter().map(|e| e.0).collect();
            let ws: Vec<f64> = q_sparse.iter().map(|e| e.1).collect();
            let mut s = Sampler::new(SamplingParams {
                seed: 21 + k as u64,
                ..params.clone()
            });
            let (mut counts, mut kept) = ([0usize; 6], 0);
            for _ in 0..n {
                let draft = pick(&ids, &ws, draws.gen());
                let (t, same) = s.verify_against(&logits, draft, &q_sparse);
                assert_eq!(same, t == draft);
                kept += same as usize;
                counts[t as usize] += 1;
            }
            assert_frequencies(&counts, &want, n, &format!("q {k}"));
            // The acceptance rate is sum min(p, q) (the overlap of the two).
            let overlap: f64 = want.iter().zip(q).map(|(p, q)| p.min(*q)).sum();
            let f = kept as f64 / n as f64;
            assert!(
                (f - overlap).abs() < 0.01,
                "q {k}: kept {f}, want {overlap}"
            );
        }
        // A proposal from the same distribution is kept whole; greedy proposes the argmax.
        let mut s = Sampler::new(params.clone());
        let (t, q) = s.propose(&logits);
        assert_eq!(q.iter().map(|e| e.1).sum::<f64>().round(), 1.0);
        assert!(
            q.iter().all(|e| e.0 != 3),
            "top-k leaves out the lowest logit"
        );
        assert!(q.iter().any(|e| e.0 == t));
        let mut g = Sampler::new(SamplingParams::greedy());
        assert_eq!(g.propose(&logits), (0, vec![(0, 1.0)]));
        assert_eq!(
            g.verify_against(&logits, 5, &[(5, 0.9), (0, 0.1)]),
            (0, false)
        );
    }

    #[test]
    fn greedy_takes_the_argmax_after_penalties() {
        let mut s = Sampler::new(SamplingParams {
            repeat_penalty: 2.0,
            ..SamplingParams::greedy()
        });
        s.observe(&[0]);
        // Token 0: 3.0 / 2 = 1.5 < 2.0.
        assert_eq!(s.sample(&[3.0, 2.0, 1.0]), 1);
        let mut s = Sampler::new(SamplingParams {
            presence_penalty: 0.5,
            frequency_penalty: 0.5,
            ..SamplingParams::greedy()
        });
        s.observe(&[0, 0]);
        // Token 0: 3.0 - 2 * 0.5 - 0.5 = 1.5 < 2.0.
        assert_eq!(s.sample(&[3.0, 2.0, 1.0]), 1);
    }

    #[test]
    fn logit_bias_and_log_probabilities() {
        let mut s = Sampler::new(SamplingParams {
            logit_bias: vec![(2, 5.0)],
            ..SamplingParams::greedy()
        });
        assert_eq!(s.sample(&[3.0, 2.0, 1.0]), 2);
        // log softmax of [0, ln 3]: probabilities 1/4 and 3/4.
        let lp = log_softmax(&[0.0, 3f32.ln()]);
        assert!((lp[0] - 0.25f32.ln()).abs() < 1e-6 && (lp[1] - 0.75f32.ln()).abs() < 1e-6);
        assert_eq!(
            top_n(&[-3.0, -1.0, -2.0, -1.0], 3),
            vec![(1, -1.0), (3, -1.0), (2, -2.0)]
        );
        assert_eq!(top_n(&[-3.0, -1.0], 0), vec![]);
    }

    #[test]
    fn same_seed_same_tokens_and_filters_hold() {
        let logits: Vec<f32> = (0..100).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
        let params = SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 42,
            ..SamplingParams::default()
        };
        let run = |p: &SamplingParams| -> Vec<u32> {
            let mut s = Sampler::new(p.clone());
            (0..200).map(|_| s.sample(&logits)).collect()
        };
        assert_eq!(run(&params), run(&params));
        assert_ne!(
            run(&params),
            run(&SamplingParams {
                seed: 43,
                ..params.clone()
            })
        );
        // top-k 3: only the three best ids ever appear.
        let mut best: Vec<u32> = (0..100).collect();
        best.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
        let k3 = run(&SamplingParams {
            top_k: 3,
            ..params.clone()
        });
        assert!(k3.iter().all(|t| best[..3].contains(t)));
        assert!(best[..3].iter().all(|t| k3.contains(t)));
        // min-p 1.0 keeps only the top token.
        assert!(run(&SamplingParams {
            min_p: 1.0,
            ..params.clone()
        })
        .iter()
        .all(|&t| t == best[0]));
        // Empirical frequencies follow softmax at temperature 1 (top-k 2): p0/p1 = e^(l0-l1).
        let mut s = Sampler::new(SamplingParams {
            top_k: 2,
            ..params.clone()
        });
        let n = 20000;
        let c0 = (0..n).filter(|_| s.sample(&logits) == best[0]).count() as f64;
        let want = 1.0 / (1.0 + (logits[best[1] as usize] - logits[best[0] as usize]).exp() as f64);
        assert!(
            (c0 / n as f64 - want).abs() < 0.02,
            "{} vs {want}",
            c0 / n as f64
        );
    }
}
