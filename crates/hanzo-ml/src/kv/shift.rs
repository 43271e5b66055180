//! A conversation longer than its store: a pinned prefix that every layer keeps, eviction of
//! the oldest positions after it (the later ones move down), truncation back to a shorter
//! history, and the key rows a model re-rotates after a move.
//!
//! Only a sequence that shares no block can move its positions (the edge runtime's one
//! sequence); a moved sequence stops registering blocks in the prefix cache, since its
//! blocks no longer hold what the token hashes say.

use super::arena::Arena;
use super::paged::{PagedKv, NONE};
use super::{KvError, SeqId};
use std::ops::Range;

impl PagedKv {
    /// Keeps positions `0..n` of `id` in every layer from now on, window layers included, so
    /// that they can stay the start of the sequence when later positions are evicted
    /// ([`Self::evict`]). The pinned positions a window layer has dropped already are not
    /// brought back: pin before writing them.
    pub fn pin(&mut self, id: SeqId, n: usize) -> Result<(), KvError> {
        self.seq_mut(id)?.pinned = n;
        Ok(())
    }

    /// Lets the window layers of `id` keep `n` positions more than their windows see, so
    /// that [`Self::truncate`] can take back up to `n` positions (a chat whose last reply
    /// tokenizes differently when the client sends it back). The caller's budget counts
    /// them as `n` more positions per pass ([`super::KvLayout::blocks_pinned`]).
    pub fn keep_behind(&mut self, id: SeqId, n: usize) -> Result<(), KvError> {
        self.seq_mut(id)?.slack = n;
        Ok(())
    }

    /// Positions of `id` that stay in every layer.
    pub fn pinned(&self, id: SeqId) -> Result<usize, KvError> {
        Ok(self.seq(id)?.pinned)
    }

    /// Removes `count` positions of `id` right after its pinned prefix: positions
    /// `pinned + count..len` move down to `pinned..len - count`, in every layer that still
    /// needs them (a window layer only what its window will see). Returns, per layer, the
    /// positions whose keys moved: a model with rotary positions re-rotates those
    /// ([`Self::keys`], [`Self::set_keys`]). Blocks past the new length go back to the pool.
    pub fn evict(&mut self, id: SeqId, count: usize) -> Result<Vec<Range<usize>>, KvError> {
        let s = self.seq(id)?;
        let (len, pinned, slack) = (s.len, s.pinned, s.slack);
        if count == 0 {
            return Ok(vec![len..len; self.layout.layers()]);
        }
        if pinned + count > len {
            return Err(KvError::Shift(format!(
                "cannot evict {count} of {len} positions after {pinned} pinned ones"
            )));
        }
        self.check_unshared(id)?;
        let new_len = len - count;
        let mut moved = Vec::with_capacity(self.layout.layers());
        for l in 0..self.layout.layers() {
            // What the next query (at `new_len`) can see in this layer, of what moves.
            let from = match self.layout.windows[l] {
                Some(w) => pinned.max((new_len + 1).saturating_sub(w + slack)),
                None => pinned,
            };
            let rows = self.read_rows(id, l, from + count..len);
            self.relayout(id, l, new_len)?;
            // The blocks rewritten no longer hold what the prefix cache names them by.
            let b = self.layout.block_size;
            self.forget_layer_blocks(id, l, from / b..new_len.div_ceil(b));
            self.write_rows(id, l, from, len.saturating_sub(from + count), &rows);
            moved.push(from..new_len);
        }
        let s = self.seq_mut(id)?;
        s.len = new_len;
        s.cacheable = false;
        Ok(moved)
    }

    /// Forgets positions `len..` of `id` (a history that diverged there, a speculative draft
    /// turned down). An error, with nothing changed, when a window layer has already dropped
    /// positions its window would see again at `len`: the caller starts the sequence over.
    /// Blocks shared with other sequences stay as they are (`reserve` copies the one being
    /// filled again before writing it); the sequence's own block that is filled again leaves
    /// the prefix cache, and its later full blocks enter it under the tokens kept.
    pub fn truncate(&mut self, id: SeqId, len: usize) -> Result<(), KvError> {
        let s = self.seq(id)?;
        if len > s.len {
            return Err(KvError::Shift(format!(
                "cannot truncate {} positions to {len}",
                s.len
            )));
        }
        if len == s.len {
            return Ok(());
        }
        let b = self.layout.block_size;
        let pinned_blocks = s.pinned.div_ceil(b);
        for l in 0..self.layout.layers() {
            let first = self.layout.first_live(l, len).max(pinned_blocks);
            if (first..len.div_ceil(b)).any(|blk| s.tables[l][blk] == NONE) {
                return Err(KvError::Shift(format!(
                    "layer {l} no longer holds the positions its window sees at {len}"
                )));
            }
        }
        for l in 0..self.layout.layers() {
            self.relayout(id, l, len)?;
        }
        if !len.is_multiple_of(b) {
            self.forget_blocks(id, len / b..len / b + 1);
        }
        let s = self.seq_mut(id)?;
        s.len = len;
        s.tokens.truncate(len);
        s.chains.truncate(len / b);
        Ok(())
    }

    /// Keys of `positions` of one layer, as f32 (`[positions][row]`).
    pub fn keys(&self, id: SeqId, layer: usize, positions: Range<usize>) -> Vec<f32> {
        let row = self.layout.row;
        let mut out = vec![0f32; positions.len() * row];
        if let Ok(view) = self.layer(id, layer) {
            for (p, o) in positions.zip(out.chunks_exact_mut(row)) {
                view.key_into(p, 0, o);
            }
        }
        out
    }

    /// Overwrites the keys of positions `from..` of one layer (`[positions][row]`, rounded
    /// to f16 or quantized); the positions must be held.
    pub fn set_keys(
        &mut self,
        id: SeqId,
        layer: usize,
        from: usize,
        keys: &[f32],
    ) -> Result<(), KvError> {
        let (row, b) = (self.layout.row, self.layout.block_size);
        let table = &self.seq(id)?.tables[layer];
        let t = keys.len() / row;
        if keys.len() != t * row
            || (from..from + t).any(|p| table.get(p / b).is_none_or(|&x| x == NONE))
        {
            return Err(KvError::Unreserved {
                seq: id,
                positions: t,
            });
        }
        let at: Vec<usize> = (from..from + t)
            .map(|p| (table[p / b] as usize * b + p % b) * row)
            .collect();
        for (a, kr) in at.into_iter().zip(keys.chunks_exact(row)) {
            self.k.write(a, kr);
        }
        Ok(())
    }

    /// Takes logical blocks `range` of every layer of `id` (its own: unshared) out of the
    /// prefix cache, before they are written again.
    fn forget_blocks(&mut self, id: SeqId, range: Range<usize>) {
        for l in 0..self.layout.layers() {
            self.forget_layer_blocks(id, l, range.clone());
        }
    }

    fn forget_layer_blocks(&mut self, id: SeqId, layer: usize, range: Range<usize>) {
        let table = &self.seqs[id.0 as usize].as_ref().expect("checked").tables[layer];
        for &blk in table.get(range).unwrap_or_default() {
            if blk != NONE && self.blocks.refs(blk) == 1 {
                self.blocks.forget(blk);
            }
        }
    }

    fn check_unshared(&self, id: SeqId) -> Result<(), KvError> {
        let s = self.seq(id)?;
        let shared = s
            .tables
            .iter()
            .flatten()
            .any(|&blk| blk != NONE && self.blocks.refs(blk) > 1);
        if shared {
            return Err(KvError::Shift(format!(
                "sequence {id} shares blocks with another; only a lone sequence moves"
            )));
        }
        Ok(())
    }

    /// Where position `p` of `layer` starts in the arenas.
    fn row_at(&self, id: SeqId, layer: usize, p: usize) -> usize {
        let (row, b) = (self.layout.row, self.layout.block_size);
        let table = &self.seqs[id.0 as usize].as_ref().expect("checked").tables[layer];
        (table[p / b] as usize * b + p % b) * row
    }

    /// Keys and values of `positions` of one layer, as held (no rounding).
    fn read_rows(&self, id: SeqId, layer: usize, positions: Range<usize>) -> (Arena, Arena) {
        let (row, dtype) = (self.layout.row, self.layout.dtype);
        let mut k = Arena::with_capacity(dtype, positions.len() * row);
        let mut v = Arena::with_capacity(dtype, positions.len() * row);
        for p in positions {
            let at = self.row_at(id, layer, p);
            k.push_from(&self.k, at, row);
            v.push_from(&self.v, at, row);
        }
        (k, v)
    }

    /// Writes rows read by `read_rows` (`n` positions) at positions `from..` of one layer.
    fn write_rows(
        &mut self,
        id: SeqId,
        layer: usize,
        from: usize,
        n: usize,
        (k, v): &(Arena, Arena),
    ) {
        let row = self.layout.row;
        for i in 0..n {
            let at = self.row_at(id, layer, from + i);
            self.k.put(at, k, i * row, row);
            self.v.put(at, v, i * row, row);
        }
    }

    /// Makes layer `layer` of `id` hold exactly the blocks a sequence of `len` positions
    /// needs there: the blocks past `len` and those out of the window (the pinned ones
    /// excepted) go back to the pool first, then the missing ones in the window are taken, so
    /// the count held never exceeds what the window needs.
    fn relayout(&mut self, id: SeqId, layer: usize, len: usize) -> Result<(), KvError> {
        let b = self.layout.block_size;
        let mut s = self.seqs[id.0 as usize].take().expect("checked");
        let first = self.layout.first_live(layer, len.saturating_sub(s.slack));
        let pinned_blocks = s.pinned.div_ceil(b);
        let want = len.div_ceil(b);
        let table = &mut s.tables[layer];
        for (blk, slot) in table.iter_mut().enumerate() {
            let keep = blk < want && (blk < pinned_blocks || blk >= first);
            if !keep && *slot != NONE {
                self.blocks.release(*slot);
                *slot = NONE;
            }
        }
        table.truncate(want);
        let missing = table[first.min(want)..]
            .iter()
            .filter(|&&x| x == NONE)
            .count();
        let result = if missing > self.blocks.free() {
            Err(KvError::OutOfBlocks {
                seq: id,
                needed: missing,
                free: self.blocks.free(),
            })
        } else {
            for slot in table[first.min(want)..].iter_mut().filter(|x| **x == NONE) {
                *slot = self.blocks.alloc();
            }
            Ok(())
        };
        s.live_from[layer] = first.min(want);
        self.seqs[id.0 as usize] = Some(s);
        result
    }
}
