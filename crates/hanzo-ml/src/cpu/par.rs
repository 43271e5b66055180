//! The parallel loops of the hot paths, on one set of threads.
//!
//! Every loop runs on the spinning team (`cpu::team`) when it is free, and on rayon's pool
//! only when it is not (a loop inside a team task, or a second caller at the same time). With
//! some loops on the team and others on rayon, each pool's idle threads spun while the other
//! worked: on a 2-vCPU machine that cost batched decode a quarter of its speed.
//!
//! The closures are `&dyn Fn`: a rayon iterator chain is generic over its closure, so every
//! element-wise op × dtype pair instantiated its own copy (megabytes of the binary).

use rayon::prelude::*;
use std::sync::Mutex;

/// Runs `f(i)` for every `i` in `0..n`: on the spinning decode team when it is free (see
/// `cpu::team`), on rayon's pool otherwise. Two pools busy at once would oversubscribe the
/// cores: while one runs a loop, the other's idle threads spin on the same cores.
pub fn par_for(n: usize, f: &(dyn Fn(usize) + Sync)) {
    if !super::team::global().run(n, f) {
        (0..n).into_par_iter().for_each(f)
    }
}

/// `f(state, i)` for every `i` in `0..n`, in parallel; each task borrows a state that `init`
/// made, and later tasks reuse it (as many states as tasks run at once), like rayon's
/// `for_each_init`.
pub fn par_for_with<S: Send>(
    n: usize,
    init: &(dyn Fn() -> S + Sync),
    f: &(dyn Fn(&mut S, usize) + Sync),
) {
    let idle: Mutex<Vec<S>> = Mutex::new(Vec::new());
    let take = || idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
    par_for(n, &|i| {
        let mut state = take().unwrap_or_else(init);
        f(&mut state, i);
        idle.lock().unwrap_or_else(|e| e.into_inner()).push(state);
    });
}

/// `f(i, chunk)` for every `chunk`-element piece of `out` (the last may be shorter), in
/// parallel.
pub fn for_each_chunk<U: Send>(out: &mut [U], chunk: usize, f: &(dyn Fn(usize, &mut [U]) + Sync)) {
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

/// A vector of `len` elements written like `for_each_chunk`'s `out`: each task zeroes its
/// chunk right before `f` writes it, in cache, rather than the allocating thread zeroing the
/// whole buffer first. The heap hands large activations back for reuse (`alloc`), so
/// calloc's zeroing of them was a serial pass over memory while the other threads waited
/// (4% of a 512-token prefill's samples in `perf`, all on the calling thread).
pub fn filled_chunks<U: bytemuck::Zeroable + Send>(
    len: usize,
    chunk: usize,
    f: &(dyn Fn(usize, &mut [U]) + Sync),
) -> Vec<U> {
    use std::mem::MaybeUninit;
    let mut out: Vec<MaybeUninit<U>> = Vec::with_capacity(len);
    // SAFETY: `MaybeUninit` elements need no initialisation; the capacity is `len`.
    unsafe { out.set_len(len) };
    super::alloc::advise_huge(out.as_ptr(), len);
    for_each_chunk(&mut out, chunk, &|i, piece| {
        // SAFETY: all-zero bytes are a valid `U` (`Zeroable`), so once written the piece is
        // initialised, and `MaybeUninit<U>` has `U`'s layout.
        let piece = unsafe {
            std::ptr::write_bytes(piece.as_mut_ptr(), 0, piece.len());
            &mut *(piece as *mut [MaybeUninit<U>] as *mut [U])
        };
        f(i, piece)
    });
    let mut out = std::mem::ManuallyDrop::new(out);
    // SAFETY: every chunk was zeroed by its task (`for_each_chunk` covers `0..len`), so all
    // `len` elements are initialised `U`s; pointer, length and capacity are the vector's.
    unsafe { Vec::from_raw_parts(out.as_mut_ptr() as *mut U, len, out.capacity()) }
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
