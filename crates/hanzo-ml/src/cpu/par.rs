//! Parallel loops with one copy of rayon's splitting machinery for the whole crate. A rayon
//! iterator chain is generic over its closure, so every element-wise op × dtype pair instantiated
//! its own copy (hundreds of them, megabytes of the `hanzo-engine` binary). Here the closure
//! is a `&dyn Fn`, so only the small per-chunk bodies are generic.

use rayon::prelude::*;

/// Runs `f(i)` for every `i` in `0..n` on rayon's pool.
pub(crate) fn par_for(n: usize, f: &(dyn Fn(usize) + Sync)) {
    (0..n).into_par_iter().for_each(f)
}

/// `f(i, chunk)` for every `chunk`-element piece of `out` (the last may be shorter), in
/// parallel.
pub(crate) fn for_each_chunk<U: Send>(
    out: &mut [U],
    chunk: usize,
    f: &(dyn Fn(usize, &mut [U]) + Sync),
) {
    let (len, chunk) = (out.len(), chunk.max(1));
    let base = SendPtr(out.as_mut_ptr());
    par_for(len.div_ceil(chunk), &|i| {
        let start = i * chunk;
        let n = chunk.min(len - start);
        // SAFETY: distinct `i` give disjoint ranges `start..start + n`, all inside `out`,
        // which stays mutably borrowed (so otherwise untouched) until `par_for` returns.
        let piece = unsafe { std::slice::from_raw_parts_mut(base.at(start), n) };
        f(i, piece)
    });
}

/// A pointer handed to the pool's threads; see `for_each_chunk` for why that is sound.
struct SendPtr<U>(*mut U);

impl<U> SendPtr<U> {
    /// `self + offset`; a method so closures capture the whole `SendPtr`, not its field.
    fn at(&self, offset: usize) -> *mut U {
        self.0.wrapping_add(offset)
    }
}

// SAFETY: only used by `for_each_chunk`, whose threads write disjoint pieces of `U: Send`.
unsafe impl<U: Send> Sync for SendPtr<U> {}
// SAFETY: as above.
unsafe impl<U: Send> Send for SendPtr<U> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_element_is_visited_once_with_its_chunk_index() {
        for (len, chunk) in [(0, 4), (1, 4), (10, 3), (1000, 7), (64, 64)] {
            let mut out = vec![usize::MAX; len];
            for_each_chunk(&mut out, chunk, &|i, piece| {
                for (k, o) in piece.iter_mut().enumerate() {
                    assert_eq!(*o, usize::MAX);
                    *o = i * chunk + k;
                }
            });
            assert!(
                out.iter().enumerate().all(|(k, &o)| o == k),
                "{len} {chunk}"
            );
        }
    }
}
