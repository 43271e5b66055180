use super::*;

const ROW: usize = 4;

/// Keys of position `p` in `layer` of a sequence whose token at `p` is `tok`: a function of
/// both (small integers, exact in f16), so a block read back from the wrong place shows.
fn key(layer: usize, p: usize, tok: u32) -> Vec<f32> {
    vec![layer as f32, p as f32, tok as f32, (layer * 100 + p) as f32]
}

/// Runs `tokens` through `seq` as a model would: reserve, write every layer, commit.
fn feed(kv: &mut PagedKv, seq: SeqId, tokens: &[u32]) -> std::result::Result<(), KvError> {
    kv.reserve(seq, tokens.len())?;
    let start = kv.len(seq)?;
    for l in 0..kv.layout().layers() {
        let k: Vec<f32> = tokens
            .iter()
            .enumerate()
            .flat_map(|(i, &t)| key(l, start + i, t))
            .collect();
        let v: Vec<f32> = k.iter().map(|x| -x).collect();
        kv.write(seq, l, &k, &v)?;
    }
    kv.commit(seq, tokens)
}

/// Checks that every position `layer` still holds reads back what `feed` wrote.
fn check(kv: &PagedKv, seq: SeqId, tokens: &[u32], positions: std::ops::Range<usize>) {
    for l in 0..kv.layout().layers() {
        let view = kv.layer(seq, l).unwrap();
        let from = match kv.layout().windows[l] {
            Some(w) => positions.start.max((positions.end + 1).saturating_sub(w)),
            None => positions.start,
        };
        for (p, &tok) in tokens.iter().enumerate().take(positions.end).skip(from) {
            let got: Vec<f32> = key_row(&view, p, 0, ROW);
            assert_eq!(got, key(l, p, tok), "layer {l} position {p}");
            let val: Vec<f32> = value_row(&view, p, 0, ROW);
            assert_eq!(
                val,
                key(l, p, tokens[p]).iter().map(|x| -x).collect::<Vec<_>>()
            );
        }
    }
}

/// `len` values of a position's key row from `offset`, as stored (f16) and widened.
fn key_row(view: &LayerView, p: usize, offset: usize, len: usize) -> Vec<f32> {
    let row = view.key_f16(p, offset, len).expect("an f16 store");
    row.iter().map(|x| x.to_f32()).collect()
}

/// As [`key_row`], for values.
fn value_row(view: &LayerView, p: usize, offset: usize, len: usize) -> Vec<f32> {
    let row = view.value_f16(p, offset, len).expect("an f16 store");
    row.iter().map(|x| x.to_f32()).collect()
}

fn layout(windows: Vec<Option<usize>>) -> KvLayout {
    KvLayout {
        row: ROW,
        windows,
        block_size: 4,
        dtype: KvDtype::F16,
    }
}

#[test]
fn blocks_come_back_when_sequences_end_or_are_cancelled() {
    let mut kv = PagedKv::with_blocks(layout(vec![None, None]), 40);
    let prompt: Vec<u32> = (0..10).collect();
    let a = kv.add_sequence();
    feed(&mut kv, a, &prompt).unwrap();
    let b = kv.add_sequence();
    feed(&mut kv, b, &prompt[..3]).unwrap(); // cancelled mid-prompt
    assert_eq!(kv.free_blocks(), 40 - 2 * 3 - 2);
    check(&kv, a, &prompt, 0..10);
    kv.release(b).unwrap();
    for t in 10..20 {
        feed(&mut kv, a, &[t]).unwrap();
    }
    kv.release(a).unwrap();
    assert_eq!(kv.free_blocks(), 40);
    assert_eq!(kv.sequences(), 0);
    assert_eq!(kv.release(a), Err(KvError::UnknownSequence(a)));
}

#[test]
fn an_exhausted_pool_refuses_with_a_typed_error_and_changes_nothing() {
    let mut kv = PagedKv::with_blocks(layout(vec![None, None]), 6);
    let a = kv.add_sequence();
    feed(&mut kv, a, &[1; 8]).unwrap(); // 2 blocks × 2 layers
    let b = kv.add_sequence();
    let err = feed(&mut kv, b, &[2; 9]).unwrap_err();
    assert_eq!(
        err,
        KvError::OutOfBlocks {
            seq: b,
            needed: 6,
            free: 2
        }
    );
    assert_eq!((kv.free_blocks(), kv.len(b).unwrap()), (2, 0));
    // The other sequence goes on.
    feed(&mut kv, a, &[3]).unwrap();
    check(&kv, a, &[1, 1, 1, 1, 1, 1, 1, 1, 3], 0..9);
}

#[test]
fn a_shared_prefix_is_reused_and_evicted_blocks_are_recomputed() {
    let mut kv = PagedKv::with_blocks(layout(vec![None, Some(5)]), 40);
    let prompt: Vec<u32> = (100..114).collect();
    let a = kv.add_sequence();
    feed(&mut kv, a, &prompt).unwrap();
    kv.release(a).unwrap();
    assert_eq!(kv.free_blocks(), 40);
    // The same prompt with another ending: 3 full blocks match (12 positions).
    let mut other = prompt[..12].to_vec();
    other.extend([7, 8, 9]);
    let (b, hit) = kv.add_sequence_with_prefix(&other);
    assert_eq!(hit, 12);
    assert_eq!(kv.stats().prefix_hit, 12);
    feed(&mut kv, b, &other[12..]).unwrap();
    check(&kv, b, &other, 0..15);
    // A prompt that is exactly the cached blocks still computes its last token.
    let (c, hit) = kv.add_sequence_with_prefix(&prompt[..12]);
    assert_eq!(hit, 8);
    kv.release(c).unwrap();
    kv.release(b).unwrap();
    // Fill the pool with unrelated work: the cached blocks are evicted...
    let d = kv.add_sequence();
    feed(&mut kv, d, &[5; 80]).unwrap();
    kv.release(d).unwrap();
    let (e, hit) = kv.add_sequence_with_prefix(&prompt);
    assert_eq!(hit, 0);
    // ... and recomputed from scratch give the same contents.
    feed(&mut kv, e, &prompt).unwrap();
    check(&kv, e, &prompt, 0..14);
    kv.release(e).unwrap();
    assert_eq!(kv.free_blocks(), 40);
}

#[test]
fn namespaces_share_no_prefix_blocks() {
    let mut kv = PagedKv::with_blocks(layout(vec![None, Some(5)]), 40);
    let prompt: Vec<u32> = (100..114).collect();
    // Computed in namespace 7 (say, with an adapter): found there only.
    let (a, hit) = kv.add_sequence_with_prefix_in(&prompt, 7);
    assert_eq!(hit, 0);
    feed(&mut kv, a, &prompt).unwrap();
    kv.release(a).unwrap();
    let (b, hit) = kv.add_sequence_with_prefix(&prompt);
    assert_eq!(
        hit, 0,
        "the default namespace found another namespace's blocks"
    );
    let (c, hit) = kv.add_sequence_with_prefix_in(&prompt, 8);
    assert_eq!(hit, 0);
    let (d, hit) = kv.add_sequence_with_prefix_in(&prompt, 7);
    assert_eq!(hit, 12);
    // The blocks it fills past the hit join namespace 7 too.
    feed(&mut kv, d, &prompt[12..]).unwrap();
    check(&kv, d, &prompt, 0..14);
    for s in [b, c, d] {
        kv.release(s).unwrap();
    }
    assert_eq!(kv.free_blocks(), 40);
}

#[test]
fn window_layers_keep_only_what_the_window_sees() {
    // Layer 0 full, layer 1 sees the last 6 positions.
    let mut kv = PagedKv::with_blocks(layout(vec![None, Some(6)]), 100);
    let a = kv.add_sequence();
    let tokens: Vec<u32> = (0..40).collect();
    for chunk in tokens.chunks(3) {
        feed(&mut kv, a, chunk).unwrap();
    }
    // Layer 0 holds all 10 blocks; layer 1 the blocks of positions 35..40 (keys the query
    // at 40 sees), 8 and 9.
    assert_eq!(kv.free_blocks(), 100 - 10 - 2);
    check(&kv, a, &tokens, 0..40);
    // In passes of 3 tokens: 10 blocks of the full layer, at most (3 + 5) / 4 + 2 of the
    // window layer.
    assert_eq!(kv.layout().blocks_for(40, 3), 10 + 4);
}

#[test]
fn a_fork_copies_the_shared_block_it_writes_into() {
    let mut kv = PagedKv::with_blocks(layout(vec![None]), 20);
    let a = kv.add_sequence();
    let prompt = [1, 2, 3, 4, 5, 6];
    feed(&mut kv, a, &prompt).unwrap();
    let b = kv.fork(a).unwrap();
    assert_eq!(kv.free_blocks(), 18);
    feed(&mut kv, a, &[7]).unwrap(); // copies block 1 for a
    feed(&mut kv, b, &[8]).unwrap(); // b is now alone in the original
    assert_eq!(kv.free_blocks(), 17);
    check(&kv, a, &[1, 2, 3, 4, 5, 6, 7], 0..7);
    check(&kv, b, &[1, 2, 3, 4, 5, 6, 8], 0..7);
    kv.release(a).unwrap();
    kv.release(b).unwrap();
    assert_eq!(kv.free_blocks(), 20);
}

#[test]
fn a_budget_is_cut_into_whole_blocks() {
    let l = layout(vec![None; 3]);
    assert_eq!(l.block_bytes(), 4 * ROW * 2 * 2);
    let kv = PagedKv::new(l.clone(), 10 * l.block_bytes() + 5).unwrap();
    assert_eq!(kv.total_blocks(), 10);
    assert!(matches!(
        PagedKv::new(l, 3),
        Err(KvError::Budget { bytes: 3, .. })
    ));
}

/// Asserts that position `p` of every layer holds what `feed` wrote at `old(p)`, for the
/// positions each layer's window sees at `len` (and the pinned ones).
fn check_moved(
    kv: &PagedKv,
    seq: SeqId,
    tokens: &[u32],
    pinned: usize,
    old: impl Fn(usize) -> usize,
) {
    let len = kv.len(seq).unwrap();
    for l in 0..kv.layout().layers() {
        let view = kv.layer(seq, l).unwrap();
        let from = match kv.layout().windows[l] {
            Some(w) => (len + 1).saturating_sub(w),
            None => 0,
        };
        for p in (0..pinned).chain(from.max(pinned)..len) {
            let o = old(p);
            let got: Vec<f32> = key_row(&view, p, 0, ROW);
            assert_eq!(got, key(l, o, tokens[o]), "layer {l} position {p}");
            let val: Vec<f32> = value_row(&view, p, 0, ROW).iter().map(|x| -x).collect();
            assert_eq!(val, key(l, o, tokens[o]), "layer {l} position {p}");
        }
    }
}

#[test]
fn eviction_moves_the_positions_after_the_pinned_prefix_down() {
    // A full layer and a window layer of 6; blocks of 4.
    let lay = layout(vec![None, Some(6)]);
    let blocks = lay.blocks_pinned(24, 8, 5);
    let mut kv = PagedKv::with_blocks(lay, blocks);
    let seq = kv.add_sequence();
    kv.pin(seq, 5).unwrap();
    let tokens: Vec<u32> = (100..124).collect();
    for chunk in tokens.chunks(8) {
        feed(&mut kv, seq, chunk).unwrap();
    }
    // The window layer kept its pinned blocks (0 and 1) besides its window.
    let moved = kv.evict(seq, 9).unwrap();
    assert_eq!(kv.len(seq).unwrap(), 15);
    assert_eq!(moved, vec![5..15, 10..15]);
    check_moved(&kv, seq, &tokens, 5, |p| if p < 5 { p } else { p + 9 });
    // The store is whole again: it takes the next positions and reads them back.
    let more: Vec<u32> = (200..209).collect();
    let start = kv.len(seq).unwrap();
    feed(&mut kv, seq, &more).unwrap();
    assert_eq!(kv.len(seq).unwrap(), 24);
    let view = kv.layer(seq, 1).unwrap();
    let got: Vec<f32> = key_row(&view, 23, 0, ROW);
    assert_eq!(got, key(1, start + 8, 208));
    // Evicting more than there is after the pinned prefix changes nothing.
    assert!(matches!(kv.evict(seq, 20), Err(KvError::Shift(_))));
    assert_eq!(kv.len(seq).unwrap(), 24);
}

#[test]
fn eviction_and_truncation_hold_no_more_blocks_than_the_window_needs() {
    let lay = layout(vec![None, Some(6), Some(6)]);
    let blocks = lay.blocks_pinned(32, 4 + 3, 4);
    let mut kv = PagedKv::with_blocks(lay, blocks);
    let seq = kv.add_sequence();
    kv.pin(seq, 4).unwrap();
    kv.keep_behind(seq, 3).unwrap();
    let tokens: Vec<u32> = (0..400).collect();
    let mut fed = 0;
    // Eviction keeps the sequence inside its 32 positions for 400 tokens.
    while fed < tokens.len() {
        if kv.len(seq).unwrap() + 4 > 32 {
            let len = kv.len(seq).unwrap();
            kv.evict(seq, (len - 4) / 2).unwrap();
        }
        feed(&mut kv, seq, &tokens[fed..fed + 4]).unwrap();
        fed += 4;
    }
    assert!(kv.len(seq).unwrap() <= 32);
    // Truncating by the slack works; further back than a window layer holds fails.
    let len = kv.len(seq).unwrap();
    kv.truncate(seq, len - 3).unwrap();
    assert_eq!(kv.len(seq).unwrap(), len - 3);
    assert!(matches!(kv.truncate(seq, 8), Err(KvError::Shift(_))));
    assert_eq!(kv.len(seq).unwrap(), len - 3);
    kv.release(seq).unwrap();
    assert_eq!(kv.free_blocks(), kv.total_blocks());
}

#[test]
fn a_shared_sequence_does_not_move() {
    let mut kv = PagedKv::with_blocks(layout(vec![None]), 16);
    let a = kv.add_sequence();
    feed(&mut kv, a, &(0..10).collect::<Vec<u32>>()).unwrap();
    let b = kv.fork(a).unwrap();
    assert!(matches!(kv.evict(a, 2), Err(KvError::Shift(_))));
    kv.release(b).unwrap();
    kv.evict(a, 2).unwrap();
    assert_eq!(kv.len(a).unwrap(), 8);
}

#[test]
fn set_keys_overwrites_what_keys_reads() {
    let mut kv = PagedKv::with_blocks(layout(vec![None, None]), 16);
    let a = kv.add_sequence();
    let tokens: Vec<u32> = (0..10).collect();
    feed(&mut kv, a, &tokens).unwrap();
    let mut k = kv.keys(a, 1, 3..7);
    assert_eq!(&k[..ROW], key(1, 3, 3).as_slice());
    k.iter_mut().for_each(|x| *x += 0.5);
    kv.set_keys(a, 1, 3, &k).unwrap();
    assert_eq!(kv.keys(a, 1, 3..7), k);
    assert!(kv.set_keys(a, 1, 9, &k).is_err());
}

/// Speculative decoding's truncation in a server's store: drafts turned down leave a
/// sequence that shares blocks (a fork) or whose block the prefix cache named, and neither
/// the other sequence nor the cache sees what it writes next; its later blocks still enter
/// the cache under the tokens kept; every block comes back.
#[test]
fn truncation_leaves_shared_and_cached_blocks_as_they_were() {
    let mut kv = PagedKv::with_blocks(layout(vec![None, None]), 40);
    let a = kv.add_sequence();
    let prompt: Vec<u32> = (10..16).collect();
    feed(&mut kv, a, &prompt).unwrap();
    let b = kv.fork(a).unwrap();
    // `a` drafts 5 tokens (positions 6..11, filling block 1 and naming it in the cache) and
    // keeps 1 of them.
    let drafted = [20, 21, 22, 23, 24];
    feed(&mut kv, a, &drafted).unwrap();
    kv.truncate(a, 7).unwrap();
    assert_eq!(kv.len(a).unwrap(), 7);
    // The next tokens go into block 1 again: the cache no longer names it.
    let mut a_tokens: Vec<u32> = prompt.iter().chain(&drafted[..1]).copied().collect();
    a_tokens.extend([30, 31, 32, 33, 34, 35]);
    feed(&mut kv, a, &a_tokens[7..]).unwrap();
    check(&kv, a, &a_tokens, 0..13);
    // The fork still reads the prompt; it writes into its own copy of block 1.
    check(&kv, b, &prompt, 0..6);
    feed(&mut kv, b, &[40, 41]).unwrap();
    check(&kv, b, &[10, 11, 12, 13, 14, 15, 40, 41], 0..8);
    check(&kv, a, &a_tokens, 0..13);
    // The turned-down continuation finds only the prompt's first block...
    let mut turned_down: Vec<u32> = prompt.iter().chain(&drafted).copied().collect();
    turned_down.push(99);
    let (c, hit) = kv.add_sequence_with_prefix(&turned_down);
    assert_eq!(hit, 4);
    check(&kv, c, &turned_down, 0..4);
    // ... and the kept one what it holds now: its full blocks entered the cache after the
    // truncation too.
    let mut kept = a_tokens[..12].to_vec();
    kept.push(98);
    let (d, hit) = kv.add_sequence_with_prefix(&kept);
    assert_eq!(hit, 12);
    check(&kv, d, &kept, 0..12);
    for s in [a, b, c, d] {
        kv.release(s).unwrap();
    }
    assert_eq!(kv.free_blocks(), kv.total_blocks());
}
