//! Block bookkeeping of the paged KV store, apart from the storage: reference counts, the
//! free list in least-recently-released order, and the prefix cache (content key → block).
//!
//! A released block keeps its content key while it waits in the free list, so a later
//! sequence with the same prefix can take it back; allocation takes keyless blocks first and
//! then the least recently released keyed one, forgetting its key (that is the eviction).

use std::collections::HashMap;

/// Index of a block in the pool.
pub type BlockId = u32;

const NIL: BlockId = BlockId::MAX;

pub(crate) struct Blocks {
    refs: Vec<u32>,
    /// The content key of a block registered in the prefix cache.
    key: Vec<Option<u64>>,
    cached: HashMap<u64, BlockId>,
    // The free list, doubly linked so a cached block can leave it from anywhere. Keyless
    // blocks are taken from the head, keyed ones appended at the tail: the head is always
    // the cheapest block to reuse.
    prev: Vec<BlockId>,
    next: Vec<BlockId>,
    head: BlockId,
    tail: BlockId,
    free: usize,
}

impl Blocks {
    pub fn new(n: usize) -> Self {
        assert!(n < NIL as usize, "block count fits a u32");
        let mut b = Self {
            refs: vec![0; n],
            key: vec![None; n],
            cached: HashMap::new(),
            prev: vec![NIL; n],
            next: vec![NIL; n],
            head: NIL,
            tail: NIL,
            free: 0,
        };
        for id in 0..n as BlockId {
            b.push_back(id);
        }
        b
    }

    pub fn total(&self) -> usize {
        self.refs.len()
    }

    /// Blocks no sequence holds (keyless or cached-and-reclaimable).
    pub fn free(&self) -> usize {
        self.free
    }

    /// Blocks in the prefix cache that no sequence holds.
    pub fn cached_free(&self) -> usize {
        self.cached
            .values()
            .filter(|&&id| self.refs[id as usize] == 0)
            .count()
    }

    pub fn refs(&self, id: BlockId) -> u32 {
        self.refs[id as usize]
    }

    /// A block for new content, referenced once. The caller checked `free() > 0`.
    pub fn alloc(&mut self) -> BlockId {
        let id = self.head;
        assert!(id != NIL, "alloc on an empty pool (callers check free())");
        self.unlink(id);
        if let Some(k) = self.key[id as usize].take() {
            self.cached.remove(&k);
        }
        self.refs[id as usize] = 1;
        id
    }

    /// One more holder of `id`.
    pub fn retain(&mut self, id: BlockId) {
        if self.refs[id as usize] == 0 {
            self.unlink(id);
        }
        self.refs[id as usize] += 1;
    }

    /// One holder fewer; at zero the block joins the free list (keeping its cache key).
    pub fn release(&mut self, id: BlockId) {
        let r = &mut self.refs[id as usize];
        debug_assert!(*r > 0, "block {id} released more often than held");
        *r -= 1;
        if *r == 0 {
            if self.key[id as usize].is_some() {
                self.push_back(id);
            } else {
                self.push_front(id);
            }
        }
    }

    /// Takes `id` out of the prefix cache: its holder is about to write into it.
    pub fn forget(&mut self, id: BlockId) {
        if let Some(k) = self.key[id as usize].take() {
            self.cached.remove(&k);
        }
    }

    /// The block holding content `key`, if cached.
    pub fn lookup(&self, key: u64) -> Option<BlockId> {
        self.cached.get(&key).copied()
    }

    /// Registers `id`'s (now immutable) content under `key`, unless another block already
    /// holds it.
    pub fn register(&mut self, id: BlockId, key: u64) {
        if self.key[id as usize].is_none() && !self.cached.contains_key(&key) {
            self.cached.insert(key, id);
            self.key[id as usize] = Some(key);
        }
    }

    fn push_back(&mut self, id: BlockId) {
        self.prev[id as usize] = self.tail;
        self.next[id as usize] = NIL;
        match self.tail {
            NIL => self.head = id,
            t => self.next[t as usize] = id,
        }
        self.tail = id;
        self.free += 1;
    }

    fn push_front(&mut self, id: BlockId) {
        self.next[id as usize] = self.head;
        self.prev[id as usize] = NIL;
        match self.head {
            NIL => self.tail = id,
            h => self.prev[h as usize] = id,
        }
        self.head = id;
        self.free += 1;
    }

    fn unlink(&mut self, id: BlockId) {
        let (p, n) = (self.prev[id as usize], self.next[id as usize]);
        match p {
            NIL => self.head = n,
            p => self.next[p as usize] = n,
        }
        match n {
            NIL => self.tail = p,
            n => self.prev[n as usize] = p,
        }
        self.prev[id as usize] = NIL;
        self.next[id as usize] = NIL;
        self.free -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyless_blocks_go_first_then_the_least_recently_released_cached_one() {
        let mut b = Blocks::new(4);
        let ids: Vec<BlockId> = (0..4).map(|_| b.alloc()).collect();
        assert_eq!(b.free(), 0);
        b.register(ids[0], 10);
        b.register(ids[1], 11);
        b.release(ids[1]); // cached, released first
        b.release(ids[0]); // cached, released second
        b.release(ids[2]); // keyless
        assert_eq!((b.free(), b.cached_free()), (3, 2));
        assert_eq!(b.alloc(), ids[2]);
        // The next allocation evicts the least recently released cached block.
        assert_eq!(b.alloc(), ids[1]);
        assert_eq!(b.lookup(11), None);
        assert_eq!(b.lookup(10), Some(ids[0]));
        // Taking a cached block back removes it from the free list.
        b.retain(ids[0]);
        assert_eq!((b.free(), b.refs(ids[0])), (0, 1));
    }
}
