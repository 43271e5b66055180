//! Speculative decoding's drafts: tokens proposed ahead of the model, all checked in one
//! forward pass (`TextGeneration::step` keeps the ones the model would have produced).

/// Prompt lookup: the draft is what followed the last time the newest `ngram` tokens
/// appeared earlier in the prompt or the reply (shorter n-grams tried when the longest has
/// no earlier match). No second model; it pays where the reply repeats its input, as code
/// edits and summaries do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PromptLookup {
    /// The longest n-gram matched (llama.cpp's `--lookup-ngram-min` counterpart is 1).
    pub ngram: usize,
    /// Tokens drafted at most per pass.
    pub max_draft: usize,
}

impl PromptLookup {
    pub fn new(ngram: usize, max_draft: usize) -> Self {
        Self { ngram, max_draft }
    }

    /// Up to `max_draft` (and `room`) tokens that followed the newest match of `history`'s
    /// last n-gram, longest n-gram first and, for one length, the most recent match; none
    /// when nothing matches.
    pub fn propose(&self, history: &[u32], room: usize) -> Vec<u32> {
        let k = self.max_draft.min(room);
        if k == 0 {
            return Vec::new();
        }
        for n in (1..=self.ngram).rev() {
            if history.len() <= n {
                continue;
            }
            let key = &history[history.len() - n..];
            // Earlier occurrences only: the newest match ends before the key itself.
            for start in (0..history.len() - n).rev() {
                if &history[start..start + n] == key {
                    let from = start + n;
                    let to = (from + k).min(history.len());
                    return history[from..to].to_vec();
                }
            }
        }
        Vec::new()
    }
}

/// Drafts from a second, smaller model sharing the target's vocabulary (attached with
/// [`TextGeneration::attach_draft`](crate::TextGeneration::attach_draft)): it proposes up to
/// `max_draft` tokens a pass, one of its own forward passes each, sampled as the target
/// samples, and the target checks them all in one pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelDraft {
    pub max_draft: usize,
}

/// A drafted token and the distribution it was drawn from (token, probability), which the
/// target's check needs; a prompt lookup's drafts are certain.
pub type Draft = (u32, Vec<(u32, f64)>);

/// The speculative check of one pass's rows (the pending token's, then one per draft),
/// appended to `ahead` in order, each with whether the KV cache holds it: the drafts the
/// sampler keeps (held), then the token it put in the first turned-down draft's place, or
/// after a draft kept whole the token that follows it (not held: it is fed next). A kept
/// draft that `ends` the reply ends the list. Returns how many drafts were kept.
pub fn check_drafts(
    sampler: &mut crate::Sampler,
    rows: &[Vec<f32>],
    drafts: &[Draft],
    ends: impl Fn(u32) -> bool,
    ahead: &mut std::collections::VecDeque<(u32, bool)>,
) -> usize {
    let mut kept = 0;
    for (i, row) in rows.iter().enumerate() {
        let Some((draft, q)) = drafts.get(i) else {
            ahead.push_back((sampler.sample(row), false));
            break;
        };
        let (t, same) = sampler.verify_against(row, *draft, q);
        if !same {
            ahead.push_back((t, false));
            break;
        }
        kept += 1;
        ahead.push_back((t, true));
        if ends(t) {
            break;
        }
    }
    kept
}

/// How speculation went over a generation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpeculationStats {
    /// Forward passes that checked a draft.
    pub passes: usize,
    /// Tokens drafted, and of those the ones kept.
    pub drafted: usize,
    pub accepted: usize,
}

impl SpeculationStats {
    /// Kept drafts over drafted ones (0 when nothing was drafted).
    pub fn acceptance(&self) -> f64 {
        match self.drafted {
            0 => 0.0,
            d => self.accepted as f64 / d as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_longest_match_is_continued() {
        let l = PromptLookup::new(3, 4);
        // "a b c d e ... a b c" -> "d e ..." (the trigram's earlier match).
        let h = [1, 2, 3, 4, 5, 9, 9, 1, 2, 3];
        assert_eq!(l.propose(&h, 100), vec![4, 5, 9, 9]);
        assert_eq!(l.propose(&h, 2), vec![4, 5]);
        // The bigram "2 3" matched twice: the newest wins.
        let h = [2, 3, 7, 2, 3, 8, 5, 2, 3];
        assert_eq!(l.propose(&h, 100), vec![8, 5, 2, 3]);
        // Only a unigram matches.
        let h = [6, 1, 7, 8, 6];
        assert_eq!(l.propose(&h, 100), vec![1, 7, 8, 6]);
        // Nothing earlier, or no room.
        assert!(l.propose(&[1, 2, 3], 100).is_empty());
        assert!(l.propose(&[1, 2, 1], 0).is_empty());
        // A match at the very end of what came before drafts what follows it.
        assert_eq!(l.propose(&[5, 5], 100), vec![5]);
    }
}
