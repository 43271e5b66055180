//! SentencePiece-style segmentation (GGUF `tokenizer.ggml.model = "llama"`): start from
//! single characters and repeatedly merge the adjacent pair whose concatenation is the
//! highest-scoring vocabulary entry (ties: leftmost). Pieces that are not tokens fall back to
//! `<0xXX>` byte tokens. Spaces are written as U+2581 (▁) first.

use super::vocab::Vocab;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

pub const SPACE: &str = "\u{2581}";

#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

#[derive(PartialEq)]
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    len: usize,
}

impl Eq for Bigram {}

impl Ord for Bigram {
    fn cmp(&self, o: &Self) -> Ordering {
        // Max-heap: higher score first, then the smaller left index.
        self.score
            .partial_cmp(&o.score)
            .unwrap_or(Ordering::Equal)
            .then(o.left.cmp(&self.left))
    }
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

/// Byte-fallback ids, `<0x00>`..`<0xFF>`.
pub fn byte_tokens(vocab: &Vocab) -> Vec<Option<u32>> {
    (0..=255u8)
        .map(|b| {
            vocab
                .id(&format!("<0x{b:02X}>"))
                .or_else(|| std::str::from_utf8(&[b]).ok().and_then(|s| vocab.id(s)))
        })
        .collect()
}

/// Segments one run of plain text (no special tokens in it) and appends the ids.
pub fn encode(vocab: &Vocab, bytes_fallback: &[Option<u32>], text: &str, out: &mut Vec<u32>) {
    if text.is_empty() {
        return;
    }
    let escaped = text.replace(' ', SPACE);
    let s = escaped.as_str();
    let mut symbols: Vec<Symbol> = Vec::with_capacity(s.len());
    for (i, (start, ch)) in s.char_indices().enumerate() {
        symbols.push(Symbol {
            start,
            len: ch.len_utf8(),
            prev: i.checked_sub(1),
            next: Some(i + 1),
        });
    }
    if let Some(last) = symbols.last_mut() {
        last.next = None;
    }
    let mut heap = BinaryHeap::new();
    let try_pair = |heap: &mut BinaryHeap<Bigram>, symbols: &[Symbol], l: usize, r: usize| {
        let (a, b) = (symbols[l], symbols[r]);
        let piece = &s[a.start..b.start + b.len];
        if let Some(id) = vocab.id(piece) {
            heap.push(Bigram {
                score: vocab.score(id),
                left: l,
                right: r,
                len: piece.len(),
            });
        }
    };
    for i in 1..symbols.len() {
        try_pair(&mut heap, &symbols, i - 1, i);
    }
    while let Some(bg) = heap.pop() {
        let (l, r) = (symbols[bg.left], symbols[bg.right]);
        // Stale entry: one side has merged since it was queued.
        if l.len == 0 || r.len == 0 || l.len + r.len != bg.len || l.next != Some(bg.right) {
            continue;
        }
        symbols[bg.left].len += r.len;
        symbols[bg.right].len = 0;
        symbols[bg.left].next = r.next;
        if let Some(n) = r.next {
            symbols[n].prev = Some(bg.left);
        }
        if let Some(p) = symbols[bg.left].prev {
            try_pair(&mut heap, &symbols, p, bg.left);
        }
        if let Some(n) = symbols[bg.left].next {
            try_pair(&mut heap, &symbols, bg.left, n);
        }
    }
    let mut i = Some(0);
    while let Some(idx) = i {
        let sym = symbols[idx];
        let piece = &s[sym.start..sym.start + sym.len];
        match vocab.id(piece) {
            Some(id) => out.push(id),
            None => {
                for &b in piece.as_bytes() {
                    if let Some(id) = bytes_fallback[b as usize].or(vocab.special.unk) {
                        out.push(id);
                    }
                }
            }
        }
        i = sym.next;
    }
}
