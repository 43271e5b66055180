//! The paged KV store: one arena of fixed-size blocks allocated at start-up, a block table
//! per sequence and layer, prefix sharing by content hash, copy-on-write forks, and
//! sliding-window layers that give back the blocks their window has left behind.
//!
//! A block holds `block_size` positions of one layer's keys and values
//! (`[position][kv_head][head_dim]`, f16 or Q8_0: [`KvDtype`]). Every layer of a sequence has its own table, so
//! a window layer can drop its old blocks while the full-attention layers keep theirs.

use super::arena::{Arena, KvDtype};
use super::blocks::{BlockId, Blocks};
use super::KvError;
use half::f16;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash, Hasher};

/// Positions per block unless a layout says otherwise.
pub const DEFAULT_BLOCK_SIZE: usize = 16;

/// A dropped (out-of-window) or never-held table entry.
pub(super) const NONE: BlockId = BlockId::MAX;

/// The shape of a model's KV state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvLayout {
    /// Values per position per layer: kv_heads × head_dim.
    pub row: usize,
    /// Per layer: the sliding window (a query at `p` sees keys `p - w < j <= p`) or `None`
    /// for full attention.
    pub windows: Vec<Option<usize>>,
    pub block_size: usize,
    /// How keys and values are held (f16 unless the caller asks for Q8_0).
    pub dtype: KvDtype,
}

impl KvLayout {
    pub fn new(row: usize, windows: Vec<Option<usize>>) -> Self {
        Self {
            row,
            windows,
            block_size: DEFAULT_BLOCK_SIZE,
            dtype: KvDtype::F16,
        }
    }

    /// This layout with keys and values held as `dtype`.
    pub fn with_dtype(self, dtype: KvDtype) -> Self {
        Self { dtype, ..self }
    }

    /// Whether a store of this layout can hold a model's state: the same rows and layers,
    /// whatever the dtype.
    pub fn fits(&self, model: &KvLayout) -> bool {
        self.row == model.row && self.windows == model.windows
    }

    /// Whether rows are whole units of the dtype (32 values for Q8_0), as a store needs.
    pub fn check_dtype(&self) -> Result<(), KvError> {
        let unit = self.dtype.granule();
        if self.row.is_multiple_of(unit) {
            return Ok(());
        }
        Err(KvError::Layout(format!(
            "a {} KV cache needs a multiple of {unit} values per position, not {}",
            self.dtype, self.row
        )))
    }

    pub fn layers(&self) -> usize {
        self.windows.len()
    }

    /// Bytes of one block (keys and values of `block_size` positions of one layer).
    pub fn block_bytes(&self) -> usize {
        2 * self.dtype.bytes(self.block_size * self.row)
    }

    /// Blocks one sequence of up to `positions` holds at most, over every layer, when it
    /// runs at most `chunk` tokens per forward pass.
    pub fn blocks_for(&self, positions: usize, chunk: usize) -> usize {
        self.blocks_pinned(positions, chunk, 0)
    }

    /// [`Self::blocks_for`] a sequence whose first `pinned` positions stay in every layer
    /// (`PagedKv::pin`).
    pub fn blocks_pinned(&self, positions: usize, chunk: usize, pinned: usize) -> usize {
        let per_layer = positions.div_ceil(self.block_size);
        let pinned = pinned.min(positions).div_ceil(self.block_size);
        self.windows
            .iter()
            .map(|w| match w {
                // During a pass of `t` tokens a window layer holds the keys from
                // `len + 1 - w` to `len + t`: at most (t + w - 1) / B + 2 blocks, and the
                // pinned ones before them.
                Some(w) => per_layer.min(pinned + (chunk.max(1) + w - 1) / self.block_size + 2),
                None => per_layer,
            })
            .sum()
    }

    /// Blocks a sequence at `len` positions holds in `layer` (those its window still sees).
    pub(super) fn first_live(&self, layer: usize, len: usize) -> usize {
        match self.windows[layer] {
            // Block b is dropped once (b + 1) * B + w <= len + 1: the next query (at `len`)
            // sees keys from len + 1 - w on.
            Some(w) => (len + 1).saturating_sub(w) / self.block_size,
            None => 0,
        }
    }
}

/// A sequence in a [`PagedKv`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SeqId(pub(super) u32);

impl std::fmt::Display for SeqId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{}", self.0)
    }
}

#[derive(Clone)]
pub(super) struct Seq {
    /// Per layer: logical block → physical block (`NONE` once out of the window).
    pub(super) tables: Vec<Vec<BlockId>>,
    /// Per layer: blocks before this were dropped (except the pinned ones).
    pub(super) live_from: Vec<usize>,
    pub(super) len: usize,
    /// The tokens of positions `..len` (while `cacheable`: they name the blocks).
    pub(super) tokens: Vec<u32>,
    /// Per full block: the hash of every token up to its end (its prefix-cache name).
    pub(super) chains: Vec<u64>,
    /// Where the chain of hashes starts: sequences whose keys and values differ for the
    /// same tokens (a LoRA adapter) share no blocks with other namespaces.
    pub(super) namespace: u64,
    /// Positions before this stay in every layer, window layers included (`PagedKv::pin`).
    pub(super) pinned: usize,
    /// Window layers keep this many positions more than their window sees, so the sequence
    /// can be truncated by as many (`PagedKv::keep_behind`).
    pub(super) slack: usize,
    /// Whether the blocks hold what the token hashes say: false once positions were evicted
    /// or truncated, and then nothing more enters the prefix cache.
    pub(super) cacheable: bool,
}

/// Counters a server reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KvStats {
    /// Prompt positions looked up in the prefix cache.
    pub prefix_queried: usize,
    /// Of those, positions whose keys and values came from the cache.
    pub prefix_hit: usize,
}

/// The paged KV store of one model (see the module docs).
pub struct PagedKv {
    pub(super) layout: KvLayout,
    pub(super) k: Arena,
    pub(super) v: Arena,
    pub(super) blocks: Blocks,
    pub(super) seqs: Vec<Option<Seq>>,
    hasher: RandomState,
    stats: KvStats,
}

/// One layer of one sequence, as attention reads it.
#[derive(Clone, Copy)]
pub struct LayerView<'a> {
    k: &'a Arena,
    v: &'a Arena,
    table: &'a [BlockId],
    block_size: usize,
    row: usize,
}

impl<'a> LayerView<'a> {
    #[inline]
    fn at(&self, pos: usize, offset: usize, len: usize) -> std::ops::Range<usize> {
        let block = self.table[pos / self.block_size] as usize;
        let at = (block * self.block_size + pos % self.block_size) * self.row + offset;
        at..at + len
    }

    pub fn dtype(&self) -> KvDtype {
        self.k.dtype()
    }

    /// `len` key values of position `pos` from `offset` within its row (a head's slice),
    /// as stored in an f16 store; `None` in a quantized one.
    #[inline]
    pub fn key_f16(&self, pos: usize, offset: usize, len: usize) -> Option<&'a [f16]> {
        let r = self.at(pos, offset, len);
        self.k.f16(r.start, len)
    }

    /// As [`Self::key_f16`], for values.
    #[inline]
    pub fn value_f16(&self, pos: usize, offset: usize, len: usize) -> Option<&'a [f16]> {
        let r = self.at(pos, offset, len);
        self.v.f16(r.start, len)
    }

    /// `out.len()` key values of position `pos` from `offset` within its row, as f32 (exact
    /// for f16, dequantized for Q8_0).
    #[inline]
    pub fn key_into(&self, pos: usize, offset: usize, out: &mut [f32]) {
        self.k.read(self.at(pos, offset, out.len()).start, out)
    }

    /// As [`Self::key_into`], for values.
    #[inline]
    pub fn value_into(&self, pos: usize, offset: usize, out: &mut [f32]) {
        self.v.read(self.at(pos, offset, out.len()).start, out)
    }
}

/// Sequence `id` of a store's slots.
fn find(seqs: &[Option<Seq>], id: SeqId) -> Result<&Seq, KvError> {
    seqs.get(id.0 as usize)
        .and_then(Option::as_ref)
        .ok_or(KvError::UnknownSequence(id))
}

impl PagedKv {
    /// A store of as many blocks as `budget_bytes` holds.
    pub fn new(layout: KvLayout, budget_bytes: usize) -> Result<Self, KvError> {
        layout.check_dtype()?;
        let n = budget_bytes / layout.block_bytes();
        if n == 0 {
            return Err(KvError::Budget {
                bytes: budget_bytes,
                block_bytes: layout.block_bytes(),
            });
        }
        Ok(Self::with_blocks(layout, n))
    }

    /// A store of `n` blocks. The layout's rows are a multiple of its dtype's granule (32
    /// values for Q8_0; [`Self::new`] says so as an error).
    pub fn with_blocks(layout: KvLayout, n: usize) -> Self {
        assert!(
            layout.block_size > 0 && layout.row > 0 && layout.check_dtype().is_ok(),
            "a non-empty layout of whole {} rows",
            layout.dtype
        );
        let elems = n * layout.block_size * layout.row;
        Self {
            k: Arena::zeroed(layout.dtype, elems),
            v: Arena::zeroed(layout.dtype, elems),
            blocks: Blocks::new(n),
            seqs: Vec::new(),
            hasher: RandomState::new(),
            stats: KvStats::default(),
            layout,
        }
    }

    pub fn layout(&self) -> &KvLayout {
        &self.layout
    }

    pub fn total_blocks(&self) -> usize {
        self.blocks.total()
    }

    /// Blocks no sequence holds, including cached ones a new sequence could take back.
    pub fn free_blocks(&self) -> usize {
        self.blocks.free()
    }

    /// Unreferenced blocks that still hold a cached prefix.
    pub fn cached_blocks(&self) -> usize {
        self.blocks.cached_free()
    }

    /// Bytes of the arena.
    pub fn bytes(&self) -> usize {
        self.total_blocks() * self.layout.block_bytes()
    }

    pub fn stats(&self) -> KvStats {
        self.stats
    }

    /// Live sequences.
    pub fn sequences(&self) -> usize {
        self.seqs.iter().flatten().count()
    }

    pub(super) fn seq(&self, id: SeqId) -> Result<&Seq, KvError> {
        find(&self.seqs, id)
    }

    pub(super) fn seq_mut(&mut self, id: SeqId) -> Result<&mut Seq, KvError> {
        self.seqs
            .get_mut(id.0 as usize)
            .and_then(Option::as_mut)
            .ok_or(KvError::UnknownSequence(id))
    }

    fn insert(&mut self, s: Seq) -> SeqId {
        match self.seqs.iter().position(Option::is_none) {
            Some(i) => {
                self.seqs[i] = Some(s);
                SeqId(i as u32)
            }
            None => {
                self.seqs.push(Some(s));
                SeqId(self.seqs.len() as u32 - 1)
            }
        }
    }

    /// An empty sequence (it holds no blocks until [`Self::reserve`]).
    pub fn add_sequence(&mut self) -> SeqId {
        let layers = self.layout.layers();
        self.insert(Seq {
            tables: vec![Vec::new(); layers],
            live_from: vec![0; layers],
            len: 0,
            tokens: Vec::new(),
            chains: Vec::new(),
            namespace: 0,
            pinned: 0,
            slack: 0,
            cacheable: true,
        })
    }

    /// A sequence for `prompt` that starts with the longest run of whole blocks the prefix
    /// cache holds (at least one prompt token is always left to compute, for its logits).
    /// Returns the sequence and the positions it already holds.
    pub fn add_sequence_with_prefix(&mut self, prompt: &[u32]) -> (SeqId, usize) {
        self.add_sequence_with_prefix_in(prompt, 0)
    }

    /// [`Self::add_sequence_with_prefix`] within prefix-cache namespace `namespace`: it
    /// finds, and its full blocks become, only blocks of sequences of the same namespace (0
    /// is the default one). For sequences whose keys and values differ for the same tokens,
    /// such as those run with a LoRA adapter.
    pub fn add_sequence_with_prefix_in(
        &mut self,
        prompt: &[u32],
        namespace: u64,
    ) -> (SeqId, usize) {
        let b = self.layout.block_size;
        let layers = self.layout.layers();
        let max_blocks = prompt.len().saturating_sub(1) / b;
        self.stats.prefix_queried += prompt.len();
        let mut chains = Vec::with_capacity(max_blocks);
        let mut chain = namespace;
        for blk in prompt.chunks_exact(b).take(max_blocks) {
            chain = self.chain(chain, blk);
            chains.push(chain);
        }
        // Which (layer, block) pairs the cache holds.
        let found: Vec<Vec<Option<BlockId>>> = (0..layers)
            .map(|l| {
                chains
                    .iter()
                    .map(|&c| self.blocks.lookup(self.layer_key(c, l)))
                    .collect()
            })
            .collect();
        // The longest k whose needed blocks are all there: every block before it for the
        // full layers, the ones the window of position k * B still sees for the others.
        let mut hit = 0;
        for k in (1..=max_blocks).rev() {
            let complete = (0..layers).all(|l| {
                let from = self.layout.first_live(l, k * b);
                found[l][from..k].iter().all(Option::is_some)
            });
            if complete {
                hit = k;
                break;
            }
        }
        let id = self.add_sequence();
        self.seq_mut(id).expect("just added").namespace = namespace;
        if hit == 0 {
            return (id, 0);
        }
        let len = hit * b;
        let mut tables = vec![vec![NONE; hit]; layers];
        let mut live_from = vec![0; layers];
        for l in 0..layers {
            live_from[l] = self.layout.first_live(l, len);
            for blk in live_from[l]..hit {
                let block = found[l][blk].expect("checked above");
                self.blocks.retain(block);
                tables[l][blk] = block;
            }
        }
        self.stats.prefix_hit += len;
        let s = self.seq_mut(id).expect("just added");
        chains.truncate(hit);
        (s.tables, s.live_from, s.len) = (tables, live_from, len);
        (s.tokens, s.chains) = (prompt[..len].to_vec(), chains);
        (id, len)
    }

    /// A second sequence sharing `id`'s blocks (copy-on-write: the block being filled is
    /// copied by the first of the two to write into it).
    pub fn fork(&mut self, id: SeqId) -> Result<SeqId, KvError> {
        let s = self.seq(id)?.clone();
        for &block in s.tables.iter().flatten().filter(|&&b| b != NONE) {
            self.blocks.retain(block);
        }
        Ok(self.insert(s))
    }

    /// Ends a sequence (finished or cancelled): its blocks go back to the pool, the full
    /// ones staying in the prefix cache until the pool needs them.
    pub fn release(&mut self, id: SeqId) -> Result<(), KvError> {
        self.seq(id)?;
        let s = self.seqs[id.0 as usize].take().expect("checked");
        for &block in s.tables.iter().flatten().filter(|&&b| b != NONE) {
            self.blocks.release(block);
        }
        Ok(())
    }

    /// Positions the sequence holds.
    pub fn len(&self, id: SeqId) -> Result<usize, KvError> {
        Ok(self.seq(id)?.len)
    }

    /// Blocks [`Self::reserve`] would take for `t` more positions.
    pub fn blocks_needed(&self, id: SeqId, t: usize) -> Result<usize, KvError> {
        let s = self.seq(id)?;
        let b = self.layout.block_size;
        let want = (s.len + t).div_ceil(b);
        let grow: usize = s
            .tables
            .iter()
            .map(|tb| want.saturating_sub(tb.len()))
            .sum();
        // A shared block being filled is copied before it is written.
        let copies = if t > 0 && !s.len.is_multiple_of(b) {
            let last = s.len / b;
            s.tables
                .iter()
                .filter(|tb| tb[last] != NONE && self.blocks.refs(tb[last]) > 1)
                .count()
        } else {
            0
        };
        Ok(grow + copies)
    }

    /// Makes room for `t` more positions in every layer: all of it, or nothing and
    /// [`KvError::OutOfBlocks`] (the caller may preempt a sequence and try again).
    pub fn reserve(&mut self, id: SeqId, t: usize) -> Result<(), KvError> {
        let needed = self.blocks_needed(id, t)?;
        if needed > self.blocks.free() {
            return Err(KvError::OutOfBlocks {
                seq: id,
                needed,
                free: self.blocks.free(),
            });
        }
        let b = self.layout.block_size;
        let block_elems = b * self.layout.row;
        let mut s = self.seqs[id.0 as usize].take().expect("checked");
        if t > 0 && !s.len.is_multiple_of(b) {
            let last = s.len / b;
            for tb in &mut s.tables {
                let old = tb[last];
                if old != NONE && self.blocks.refs(old) > 1 {
                    let new = self.blocks.alloc();
                    let (from, to) = (old as usize * block_elems, new as usize * block_elems);
                    self.k.copy_within(from, block_elems, to);
                    self.v.copy_within(from, block_elems, to);
                    self.blocks.release(old);
                    tb[last] = new;
                }
            }
        }
        let want = (s.len + t).div_ceil(b);
        for tb in &mut s.tables {
            while tb.len() < want {
                tb.push(self.blocks.alloc());
            }
        }
        self.seqs[id.0 as usize] = Some(s);
        Ok(())
    }

    /// Writes keys and values of positions `len..len + t` of one layer (`[t][row]` f32,
    /// rounded to f16 or quantized) into blocks [`Self::reserve`] made.
    pub fn write(&mut self, id: SeqId, layer: usize, k: &[f32], v: &[f32]) -> Result<(), KvError> {
        let row = self.layout.row;
        let b = self.layout.block_size;
        // The sequence's table is read while the arena is written: borrow the field alone.
        let s = find(&self.seqs, id)?;
        let t = k.len() / row;
        let table = &s.tables[layer];
        if k.len() != v.len() || k.len() != t * row || (s.len + t).div_ceil(b) > table.len() {
            return Err(KvError::Unreserved {
                seq: id,
                positions: t,
            });
        }
        for (i, (kr, vr)) in k.chunks_exact(row).zip(v.chunks_exact(row)).enumerate() {
            let p = s.len + i;
            let at = (table[p / b] as usize * b + p % b) * row;
            self.k.write(at, kr);
            self.v.write(at, vr);
        }
        Ok(())
    }

    /// Keys and values of one layer of a sequence, for attention.
    pub fn layer(&self, id: SeqId, layer: usize) -> Result<LayerView<'_>, KvError> {
        Ok(LayerView {
            k: &self.k,
            v: &self.v,
            table: &self.seq(id)?.tables[layer],
            block_size: self.layout.block_size,
            row: self.layout.row,
        })
    }

    /// Advances the sequence past `tokens` (whose keys and values every layer has written):
    /// registers the blocks they filled in the prefix cache and lets window layers give back
    /// the blocks no later query can see.
    pub fn commit(&mut self, id: SeqId, tokens: &[u32]) -> Result<(), KvError> {
        let b = self.layout.block_size;
        let layers = self.layout.layers();
        let Some(mut s) = self.seqs.get_mut(id.0 as usize).and_then(Option::take) else {
            return Err(KvError::UnknownSequence(id));
        };
        let reserved = s.tables.first().map_or(usize::MAX, Vec::len);
        let result = if (s.len + tokens.len()).div_ceil(b) > reserved {
            Err(KvError::Unreserved {
                seq: id,
                positions: tokens.len(),
            })
        } else {
            for &tok in tokens {
                s.len += 1;
                if !s.cacheable {
                    continue;
                }
                s.tokens.push(tok);
                if s.len.is_multiple_of(b) {
                    let prev = s.chains.last().copied().unwrap_or(s.namespace);
                    let chain = self.chain(prev, &s.tokens[s.len - b..]);
                    s.chains.push(chain);
                    let blk = s.len / b - 1;
                    for l in 0..layers {
                        let block = s.tables[l][blk];
                        if block != NONE {
                            self.blocks.register(block, self.layer_key(chain, l));
                        }
                    }
                }
            }
            let pinned_blocks = s.pinned.div_ceil(b);
            for l in 0..layers {
                let to = self.layout.first_live(l, s.len.saturating_sub(s.slack));
                for blk in s.live_from[l].max(pinned_blocks)..to.min(s.tables[l].len()) {
                    let block = std::mem::replace(&mut s.tables[l][blk], NONE);
                    if block != NONE {
                        self.blocks.release(block);
                    }
                }
                s.live_from[l] = s.live_from[l].max(to);
            }
            Ok(())
        };
        self.seqs[id.0 as usize] = Some(s);
        result
    }

    fn chain(&self, prev: u64, tokens: &[u32]) -> u64 {
        let mut h = self.hasher.build_hasher();
        prev.hash(&mut h);
        tokens.hash(&mut h);
        h.finish()
    }

    fn layer_key(&self, chain: u64, layer: usize) -> u64 {
        let mut h = self.hasher.build_hasher();
        chain.hash(&mut h);
        layer.hash(&mut h);
        h.finish()
    }
}
