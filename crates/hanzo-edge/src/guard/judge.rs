//! [`Judge`]: runs the guard's classifier prompt and reads its answer.

use super::{Guard, Stage, Verdict, PROMPT_ROOM};
use crate::EdgeError;
use hanzo_ml::kv::{KvLayout, PagedKv};
use hanzo_transformers::{Logits, Message, SeqChunk, TextGeneration};
use web_time::Instant;

/// Marks where the judged text goes in the rendered prompt: a private-use character no
/// template writes. The text itself is tokenized apart, with special tokens read as plain
/// text, so that a turn cannot close the guard's prompt and answer for it.
const SLOT: &str = "\u{F8FF}";

/// The guard prompt of one stage around the judged text: the tokens before it, which every
/// category shares (the policy comes after the text), and each category's tokens after it.
struct Frame {
    before: Vec<u32>,
    after: Vec<Vec<u32>>,
}

/// The guard at run time: its model (or none, to use the chat model's), its KV store, the
/// prompt around the text (the user's turn's, then the reply's), and the tokens that answer
/// "Yes" and "No".
pub(crate) struct Judge {
    guard: Guard,
    own: Option<TextGeneration>,
    kv: PagedKv,
    chunk: usize,
    frames: [Frame; 2],
    yes: Vec<u32>,
    no: Vec<u32>,
}

impl Judge {
    /// A judge on `own`'s model, or on the chat model's (`shared`) when `own` is `None`,
    /// with a KV store of `blocks` blocks of `layout`.
    pub fn new(
        guard: Guard,
        own: Option<TextGeneration>,
        shared: &TextGeneration,
        layout: KvLayout,
        blocks: usize,
        chunk: usize,
    ) -> Result<Self, EdgeError> {
        let pipe = own.as_ref().unwrap_or(shared);
        let answer = |words: &[&str]| -> Vec<u32> {
            let mut ids: Vec<u32> = words
                .iter()
                .filter_map(|w| match pipe.tokenizer.encode(w, false, false)[..] {
                    [id] => Some(id),
                    _ => None,
                })
                .collect();
            ids.sort_unstable();
            ids.dedup();
            ids
        };
        let yes = answer(&["Yes", " Yes", "yes", " yes", "YES"]);
        let no = answer(&["No", " No", "no", " no", "NO"]);
        if yes.is_empty() || no.is_empty() {
            return Err(EdgeError::Config(
                "guard: the guard model's vocabulary has no single token for \"Yes\" or \"No\""
                    .into(),
            ));
        }
        let frames = [
            frame(pipe, Stage::Prompt, &guard)?,
            frame(pipe, Stage::Reply, &guard)?,
        ];
        Ok(Self {
            kv: PagedKv::with_blocks(layout, blocks),
            guard,
            own,
            chunk,
            frames,
            yes,
            no,
        })
    }

    pub fn guard(&self) -> &Guard {
        &self.guard
    }

    /// The guard model's verdict on `text`, the user's turn or the reply (`stage`).
    /// `shared` is the chat model's pipeline (used when the guard has no model of its own).
    pub fn judge(
        &mut self,
        shared: &TextGeneration,
        stage: Stage,
        text: &str,
    ) -> Result<Verdict, EdgeError> {
        let t0 = Instant::now();
        let mut scores: Vec<(String, f32)> = (self.guard.categories.iter())
            .map(|c| (c.name.clone(), 0.0))
            .collect();
        let pipe = self.own.as_ref().unwrap_or(shared);
        let ids = pipe.tokenizer.encode(text, false, false);
        let mut tokens = 0;
        for window in ids.chunks(self.guard.window_tokens) {
            let window_scores = self.window_scores(shared, stage, window, &mut tokens)?;
            for (score, p) in scores.iter_mut().zip(window_scores) {
                score.1 = score.1.max(p);
            }
        }
        let flagged = scores
            .iter()
            .find(|(_, p)| *p >= self.guard.threshold)
            .map(|(name, _)| name.clone());
        Ok(Verdict {
            scores,
            flagged,
            tokens,
            seconds: t0.elapsed().as_secs_f64(),
        })
    }

    /// The tokens the guard model reads to judge `text` (one window of it at most) under
    /// `category`'s policy; it answers at the position after the last one.
    pub fn prompt_tokens(
        &self,
        shared: &TextGeneration,
        stage: Stage,
        category: usize,
        text: &str,
    ) -> Result<Vec<u32>, EdgeError> {
        let frame = &self.frames[stage as usize];
        let after = frame.after.get(category).ok_or_else(|| {
            EdgeError::Request(format!("category {category} of {}", frame.after.len()))
        })?;
        let pipe = self.own.as_ref().unwrap_or(shared);
        let mut ids = pipe.tokenizer.encode(text, false, false);
        ids.truncate(self.guard.window_tokens);
        Ok([&frame.before[..], &ids, after].concat())
    }

    /// One window of text under each category's policy: the frame's start and the text
    /// are read once, then each policy's part after them, the store truncated back between
    /// them. Returns the probability of "Yes" per category.
    fn window_scores(
        &mut self,
        shared: &TextGeneration,
        stage: Stage,
        window: &[u32],
        tokens: &mut usize,
    ) -> Result<Vec<f32>, EdgeError> {
        let model = self.own.as_ref().unwrap_or(shared).model.as_ref();
        let frame = &self.frames[stage as usize];
        let chunk = self.chunk.max(1);
        let longest = frame.after.iter().map(Vec::len).max().unwrap_or(0);
        let seq = self.kv.add_sequence();
        let result = (|| {
            // What truncating back after each policy takes away stays in the window layers.
            self.kv.keep_behind(seq, longest)?;
            let prefix = [&frame.before[..], window].concat();
            for c in prefix.chunks(chunk) {
                model.forward_batch(&[SeqChunk::new(seq, c, Logits::None)], &mut self.kv)?;
            }
            *tokens += prefix.len();
            let mut out = Vec::with_capacity(frame.after.len());
            for after in &frame.after {
                let mut logits = None;
                let n = after.len().div_ceil(chunk);
                for (i, c) in after.chunks(chunk).enumerate() {
                    let want = if i + 1 == n {
                        Logits::Last
                    } else {
                        Logits::None
                    };
                    logits =
                        Some(model.forward_batch(&[SeqChunk::new(seq, c, want)], &mut self.kv)?);
                }
                *tokens += after.len();
                let row = logits
                    .expect("a frame ends in the assistant's header")
                    .flatten_all()?
                    .to_vec1::<f32>()?;
                out.push(yes_probability(&row, &self.yes, &self.no));
                self.kv.truncate(seq, prefix.len())?;
            }
            Ok::<_, EdgeError>(out)
        })();
        let _ = self.kv.release(seq);
        result
    }
}

/// The guard prompt of `stage` in `pipe`'s chat template around the judged text, for each
/// of `guard`'s categories; an error where a policy makes it longer than `PROMPT_ROOM`.
fn frame(pipe: &TextGeneration, stage: Stage, guard: &Guard) -> Result<Frame, EdgeError> {
    let (what, whose) = match stage {
        Stage::Prompt => ("message", "a user's message to an AI assistant"),
        Stage::Reply => ("reply", "an AI assistant's reply to a user"),
    };
    let mut before = Vec::new();
    let mut after = Vec::with_capacity(guard.categories.len());
    for c in &guard.categories {
        let question = format!(
            "You are a content safety classifier. Between the lines of dashes is {whose}.\n\
             ----------\n{SLOT}\n----------\n\n\
             Safety policy: {}\n\n\
             Does the {what} break the safety policy? Answer with one word: Yes or No.",
            c.policy
        );
        let rendered = pipe
            .template
            .render(&[Message::new("user", &question)], true)?;
        let (head, tail) = rendered
            .split_once(SLOT)
            .expect("the template writes the message");
        // The same for every category: only the policy, after the text, differs.
        before = pipe.template_tokens(head);
        let tail = pipe.tokenizer.encode(tail, false, true);
        if before.len() + tail.len() > PROMPT_ROOM {
            return Err(EdgeError::Config(format!(
                "guard: the prompt for category {:?} takes {} tokens besides the text; \
                 {PROMPT_ROOM} fit (shorten its policy)",
                c.name,
                before.len() + tail.len()
            )));
        }
        after.push(tail);
    }
    Ok(Frame { before, after })
}

/// P(yes) / (P(yes) + P(no)) from a row of logits, each answer's probability summed over
/// the tokens that spell it.
fn yes_probability(logits: &[f32], yes: &[u32], no: &[u32]) -> f32 {
    let lse = |ids: &[u32]| {
        let max = ids
            .iter()
            .map(|&i| logits[i as usize])
            .fold(f32::NEG_INFINITY, f32::max);
        max + ids
            .iter()
            .map(|&i| (logits[i as usize] - max).exp())
            .sum::<f32>()
            .ln()
    };
    1.0 / (1.0 + (lse(no) - lse(yes)).exp())
}

#[cfg(test)]
mod tests {
    use super::yes_probability;

    #[test]
    fn yes_probability_is_the_two_answers_softmax() {
        // Yes at 2.0 (one spelling), No at 0.0 and ln 3 (two spellings: total e^0 + 3 = 4).
        let logits = [2.0, 0.0, 3f32.ln(), -50.0];
        let p = yes_probability(&logits, &[0], &[1, 2]);
        let e2 = 2f32.exp();
        assert!((p - e2 / (e2 + 4.0)).abs() < 1e-6, "{p}");
        assert!((yes_probability(&[0.0, 0.0], &[0], &[1]) - 0.5).abs() < 1e-7);
    }
}
