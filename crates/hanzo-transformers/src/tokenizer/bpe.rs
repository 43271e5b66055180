//! Byte-level BPE (GGUF `tokenizer.ggml.model = "gpt2"`): the text is split by the
//! pre-tokenizer regexes `tokenizer.ggml.pre` names, each piece's bytes are mapped to
//! printable characters (GPT-2's byte ↔ unicode table), and adjacent symbols are merged by
//! merge rank (lowest first, ties leftmost) until no listed merge applies.

use super::vocab::Vocab;
use crate::{Error, Result};
use fancy_regex::Regex;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The regex cascade of one `tokenizer.ggml.pre` value: each regex splits every piece the
/// previous ones produced (matches and the gaps between them both become pieces).
#[derive(Debug)]
pub struct Pretokenizer {
    regexes: Vec<Regex>,
    /// Llama 3: a piece that is already a token is not run through the merges.
    ignore_merges: bool,
}

impl Pretokenizer {
    pub fn from_name(pre: &str) -> Result<Self> {
        let (exprs, ignore_merges): (&[&str], bool) = match pre {
            "default" | "gpt2" | "gpt-2" | "olmo" | "jais" => (&[GPT2], false),
            "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone"
            | "minerva-7b" => (&[r"\p{N}", GPT2], false),
            "qwen2" | "deepseek-r1-qwen" | "stablelm2" | "hunyuan" | "megrez" => (&[QWEN2], false),
            "llama3" | "llama-bpe" | "llama-v3" | "falcon3" | "pixtral" | "smaug-bpe" | "dbrx" => {
                (&[LLAMA3], true)
            }
            other => {
                return Err(Error::Tokenizer(format!(
                    "BPE pre-tokenizer {other:?} is not supported (supported: default, gpt2, \
                     smollm, starcoder, qwen2, llama3/llama-bpe and aliases)"
                )))
            }
        };
        Self::from_regexes(exprs, ignore_merges)
    }

    /// One name of each cascade `from_name` knows.
    pub const NAMES: [&'static str; 4] = ["default", "smollm", "qwen2", "llama-bpe"];

    /// Whether `other` cuts text into the same pieces as this one (on a probe with
    /// contractions, letters of several scripts, runs of digits, punctuation, spaces and
    /// newlines) and treats merges alike.
    pub fn splits_as(&self, other: &Self) -> bool {
        const PROBE: &str = "Hello world! It's 2024: they'LL pay $1234567.89 \n\n  x\t\r\n \
            ñandú Größe 你好吗 🙂 don't I'M ok?! 3 + 45 = 48\n   end  ";
        self.ignore_merges == other.ignore_merges && self.split(PROBE) == other.split(PROBE)
    }

    /// The GPT-2 regex: what a `ByteLevel` pre-tokenizer with `use_regex` applies.
    pub const GPT2: &'static str = GPT2;

    /// A cascade of explicit regexes (a tokenizer.json's `Split` / `Digits` / `ByteLevel`
    /// pre-tokenizers, in order).
    pub fn from_regexes(exprs: &[impl AsRef<str>], ignore_merges: bool) -> Result<Self> {
        let regexes = exprs
            .iter()
            .map(|e| {
                let e = e.as_ref();
                Regex::new(e).map_err(|err| Error::Tokenizer(format!("regex {e}: {err}")))
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            regexes,
            ignore_merges,
        })
    }

    /// The pieces of `text`, in order.
    pub fn split<'a>(&self, text: &'a str) -> Vec<&'a str> {
        let mut pieces = vec![text];
        for re in &self.regexes {
            let mut next = Vec::with_capacity(pieces.len() * 2);
            for p in pieces {
                let mut pos = 0;
                for m in re.find_iter(p) {
                    // A regex failure (backtrack limit) keeps the rest as one piece.
                    let Ok(m) = m else { break };
                    if m.start() > pos {
                        next.push(&p[pos..m.start()]);
                    }
                    if m.end() > m.start() {
                        next.push(m.as_str());
                    }
                    pos = m.end();
                }
                if pos < p.len() {
                    next.push(&p[pos..]);
                }
            }
            pieces = next;
        }
        pieces
    }
}

/// GPT-2's reversible byte → printable character table.
fn byte_to_char() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut extra = 0u32;
    for b in 0..=255u32 {
        let printable = (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
        table[b as usize] = if printable {
            char::from_u32(b).expect("latin-1")
        } else {
            extra += 1;
            char::from_u32(255 + extra).expect("in range")
        };
    }
    table
}

/// Bytes of a byte-level token text (characters outside the table stand for themselves).
pub fn decode_bytes(text: &str) -> Vec<u8> {
    thread_local! {
        static REV: HashMap<char, u8> =
            byte_to_char().iter().enumerate().map(|(b, &c)| (c, b as u8)).collect();
    }
    REV.with(|rev| {
        let mut out = Vec::with_capacity(text.len());
        for c in text.chars() {
            match rev.get(&c) {
                Some(&b) => out.push(b),
                None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
            }
        }
        out
    })
}

pub struct Bpe {
    pre: Pretokenizer,
    byte_char: [char; 256],
    /// Token id of each byte's character.
    byte_ids: [Option<u32>; 256],
    /// (left id, right id) → (rank, merged id).
    merges: HashMap<(u32, u32), (u32, u32)>,
}

#[derive(PartialEq, Eq)]
struct Pair {
    rank: u32,
    left: usize,
    right: usize,
    merged: u32,
}

impl Ord for Pair {
    fn cmp(&self, o: &Self) -> Ordering {
        // Max-heap turned min: lowest rank first, then leftmost.
        o.rank.cmp(&self.rank).then(o.left.cmp(&self.left))
    }
}

impl PartialOrd for Pair {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl Bpe {
    pub fn new(vocab: &Vocab, merges: &[String], pre: Pretokenizer) -> Result<Self> {
        let byte_char = byte_to_char();
        let mut byte_ids = [None; 256];
        for (b, c) in byte_char.iter().enumerate() {
            byte_ids[b] = vocab.id(c.encode_utf8(&mut [0; 4]));
        }
        let mut table = HashMap::with_capacity(merges.len());
        for (rank, m) in merges.iter().enumerate() {
            let Some((l, r)) = m.split_once(' ') else {
                return Err(Error::Tokenizer(format!("merge {rank} {m:?} has no space")));
            };
            // Merges whose parts or result are not tokens can never apply.
            if let (Some(li), Some(ri), Some(mi)) =
                (vocab.id(l), vocab.id(r), vocab.id(&format!("{l}{r}")))
            {
                table.entry((li, ri)).or_insert((rank as u32, mi));
            }
        }
        Ok(Self {
            pre,
            byte_char,
            byte_ids,
            merges: table,
        })
    }

    pub fn encode(&self, vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
        for piece in self.pre.split(text) {
            let mapped: String = piece.bytes().map(|b| self.byte_char[b as usize]).collect();
            if self.pre.ignore_merges {
                if let Some(id) = vocab.id(&mapped) {
                    out.push(id);
                    continue;
                }
            }
            self.merge_piece(piece.as_bytes(), out);
        }
    }

    fn merge_piece(&self, bytes: &[u8], out: &mut Vec<u32>) {
        // Symbols as a linked list of token ids; `None` ids are bytes with no token.
        let n = bytes.len();
        let mut ids: Vec<Option<u32>> = bytes.iter().map(|&b| self.byte_ids[b as usize]).collect();
        let mut next: Vec<Option<usize>> = (1..=n).map(|i| (i < n).then_some(i)).collect();
        let mut prev: Vec<Option<usize>> = (0..n).map(|i| i.checked_sub(1)).collect();
        let mut alive = vec![true; n];
        let mut heap = BinaryHeap::new();
        let push = |heap: &mut BinaryHeap<Pair>, ids: &[Option<u32>], l: usize, r: usize| {
            if let (Some(a), Some(b)) = (ids[l], ids[r]) {
                if let Some(&(rank, merged)) = self.merges.get(&(a, b)) {
                    heap.push(Pair {
                        rank,
                        left: l,
                        right: r,
                        merged,
                    });
                }
            }
        };
        for i in 1..n {
            push(&mut heap, &ids, i - 1, i);
        }
        while let Some(p) = heap.pop() {
            // Stale: either side changed since the pair was queued.
            if !alive[p.left] || !alive[p.right] || next[p.left] != Some(p.right) {
                continue;
            }
            match (ids[p.left], ids[p.right]) {
                (Some(a), Some(b)) if self.merges.get(&(a, b)).map(|m| m.1) == Some(p.merged) => {}
                _ => continue,
            }
            ids[p.left] = Some(p.merged);
            alive[p.right] = false;
            next[p.left] = next[p.right];
            if let Some(nn) = next[p.right] {
                prev[nn] = Some(p.left);
            }
            if let Some(pp) = prev[p.left] {
                push(&mut heap, &ids, pp, p.left);
            }
            if let Some(nn) = next[p.left] {
                push(&mut heap, &ids, p.left, nn);
            }
        }
        let mut i = (n > 0).then_some(0);
        while let Some(idx) = i {
            out.extend(ids[idx]);
            i = next[idx];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Pretokenizer;

    /// The probe tells every named cascade from the others, so a tokenizer.json's regexes
    /// get the one name that splits as they do (`tokenizer::hf::gguf_keys`).
    #[test]
    fn the_probe_tells_the_named_cascades_apart() {
        for (i, a) in Pretokenizer::NAMES.iter().enumerate() {
            for (j, b) in Pretokenizer::NAMES.iter().enumerate() {
                let (pa, pb) = (
                    Pretokenizer::from_name(a).unwrap(),
                    Pretokenizer::from_name(b).unwrap(),
                );
                assert_eq!(pa.splits_as(&pb), i == j, "{a} vs {b}");
            }
        }
        // Hugging Face's spelling of Qwen2's regex (case-insensitive group) is GGUF's qwen2.
        let hf = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
        let hf = Pretokenizer::from_regexes(&[hf], false).unwrap();
        assert!(Pretokenizer::from_name("qwen2").unwrap().splits_as(&hf));
    }
}
