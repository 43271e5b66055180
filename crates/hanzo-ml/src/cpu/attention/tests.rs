use super::*;
use crate::kv::{KvDtype, KvLayout, PagedKv, SeqId};

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    use rand::{rngs::StdRng, Rng, SeedableRng};
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect()
}

/// `n` key rows of `d` values, each row scaled apart from the others so that every key's
/// sums round differently.
#[cfg(target_arch = "x86_64")]
fn spread_keys(n: usize, d: usize, seed: u64) -> Vec<f32> {
    values(n * d, seed)
        .iter()
        .enumerate()
        .map(|(i, x)| x * (1.0 + (i / d) as f32 * 0.37))
        .collect()
}

/// A one-layer store holding `n` positions of keys `k` and values `v` (`[n][row]`), its
/// blocks interleaved with another sequence's so the block table is not the identity.
fn store(k: &[f32], v: &[f32], row: usize, n: usize) -> (PagedKv, SeqId) {
    store_as(KvDtype::F16, k, v, row, n)
}

/// [`store`] holding keys and values as `dtype`.
fn store_as(dtype: KvDtype, k: &[f32], v: &[f32], row: usize, n: usize) -> (PagedKv, SeqId) {
    let layout = KvLayout::new(row, vec![None]).with_dtype(dtype);
    let mut kv = PagedKv::with_blocks(layout, 2 * n.div_ceil(16) + 2);
    let (a, other) = (kv.add_sequence(), kv.add_sequence());
    for (i, (kc, vc)) in k.chunks(16 * row).zip(v.chunks(16 * row)).enumerate() {
        let t = kc.len() / row;
        kv.reserve(other, 16).unwrap();
        kv.write(other, 0, &vec![9.0; 16 * row], &vec![9.0; 16 * row])
            .unwrap();
        kv.commit(other, &[i as u32; 16]).unwrap();
        kv.reserve(a, t).unwrap();
        kv.write(a, 0, kc, vc).unwrap();
        kv.commit(a, &vec![0; t]).unwrap();
    }
    (kv, a)
}

/// Softmax attention in f64 over keys and values rounded to f16.
fn naive(q: &[f32], k: &[f32], v: &[f32], start: usize, mask: Mask, dims: Heads) -> Vec<f32> {
    naive_with(|x| f16::from_f32(x).to_f64(), q, k, v, start, mask, dims)
}

/// Softmax attention in f64 over keys and values as `r` gives them.
fn naive_with(
    r: impl Fn(f32) -> f64,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    start: usize,
    mask: Mask,
    dims: Heads,
) -> Vec<f32> {
    let Heads {
        heads,
        kv_heads,
        head_dim: d,
    } = dims;
    let t = q.len() / (heads * d);
    let mut out = vec![0f32; q.len()];
    for i in 0..t {
        let p = start + i;
        for h in 0..heads {
            let kh = h / (heads / kv_heads);
            let qv = &q[(i * heads + h) * d..][..d];
            let at = |c: &[f32], j: usize, e: usize| r(c[(j * kv_heads + kh) * d + e]);
            let keys: Vec<usize> = mask.keys(p, start + t).collect();
            let scores: Vec<f64> = keys
                .iter()
                .map(|&j| (0..d).map(|e| qv[e] as f64 * at(k, j, e)).sum())
                .collect();
            let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f64 = w.iter().sum();
            for e in 0..d {
                let x: f64 = keys.iter().zip(&w).map(|(&j, w)| w * at(v, j, e)).sum();
                out[(i * heads + h) * d + e] = (x / total) as f32;
            }
        }
    }
    out
}

#[cfg(target_arch = "x86_64")]
#[test]
fn wide_kernels_round_like_the_narrow_ones() {
    use crate::cpu::features::{test_kernels_at, Isa};
    if !test_kernels_at(Isa::Avx2, "attention dot products") {
        return;
    }
    let (a, b) = (values(256, 7), values(256, 8));
    let a16: Vec<f16> = a.iter().map(|&x| f16::from_f32(x)).collect();
    let a16_wide: Vec<f32> = a16.iter().map(|x| x.to_f32()).collect();
    // SAFETY: AVX2/FMA/F16C checked above.
    let narrow = unsafe { x86::dot(&a16_wide, &b) };
    // Keys read from the f16 cache score exactly like their widened copies.
    // SAFETY: as above.
    assert_eq!(narrow.to_bits(), unsafe { x86::dot(&a16, &b) }.to_bits());
    if test_kernels_at(Isa::Avx512, "attention dot products") {
        // SAFETY: AVX-512F checked on the line above.
        unsafe {
            assert_eq!(narrow.to_bits(), x86::dot_avx512(&a16_wide, &b).to_bits());
            assert_eq!(narrow.to_bits(), x86::dot_avx512(&a16, &b).to_bits());
        }
    }
    let mut wide = b.clone();
    // SAFETY: as above.
    unsafe { x86::mad_f16(&mut wide, &a16, 0.37) };
    let scalar: Vec<f32> = b
        .iter()
        .zip(&a16_wide)
        .map(|(b, a)| f16::from_f32(a.mul_add(0.37, *b)).to_f32())
        .collect();
    assert_eq!(wide, scalar);
}

/// Four keys' scores at a time equal each key's own `dot`, bit for bit, at every count of keys
/// (the remainders of four) and for f16 and f32 keys.
#[cfg(target_arch = "x86_64")]
#[test]
fn four_key_scores_equal_one_key_scores() {
    use crate::cpu::features::{test_kernels_at, Isa};
    if !test_kernels_at(Isa::Avx2, "attention scores of four keys") {
        return;
    }
    for d in [64, 96, 256] {
        let q = values(d, 11);
        let keys = spread_keys(11, d, 12);
        let keys16: Vec<f16> = keys.iter().map(|&x| f16::from_f32(x)).collect();
        for n in 1..=11 {
            let mut got = vec![0f32; n];
            let mut got16 = vec![0f32; n];
            // SAFETY: AVX2/FMA/F16C checked above; `keys` holds at least n rows of d.
            unsafe {
                x86::dots(&keys[..n * d], &q, &mut got);
                x86::dots(&keys16[..n * d], &q, &mut got16);
            }
            for j in 0..n {
                let row = j * d..(j + 1) * d;
                // SAFETY: as above.
                let (want, want16) =
                    unsafe { (x86::dot(&keys[row.clone()], &q), x86::dot(&keys16[row], &q)) };
                assert_eq!(got[j].to_bits(), want.to_bits(), "d {d} n {n} key {j}");
                assert_eq!(
                    got16[j].to_bits(),
                    want16.to_bits(),
                    "d {d} n {n} key {j}, f16"
                );
            }
        }
    }
}

/// The AVX-512 tiles of many queries' scores and value sums equal each query's own `dot` and
/// `accumulate`, bit for bit, at every count of queries and keys around the tiles' sizes.
#[cfg(target_arch = "x86_64")]
#[test]
fn query_tiles_equal_one_query_at_a_time() {
    use crate::cpu::features::{test_kernels_at, Isa};
    if !test_kernels_at(Isa::Avx512, "attention tiles of queries") {
        return;
    }
    for d in [32, 96, 256] {
        let keys = spread_keys(KEY_BLOCK, d, 21);
        let vals = values(KEY_BLOCK * d, 22);
        for count in [1, 2, 3, 4, 5, 7, 8, 9, 16] {
            let qs: Vec<Vec<f32>> = (0..count).map(|i| values(d, 30 + i as u64)).collect();
            let q: Vec<&[f32]> = qs.iter().map(|q| q.as_slice()).collect();
            for n in [1, 2, 3, 4, 7, 15, KEY_BLOCK] {
                let mut got = vec![[0f32; KEY_BLOCK]; count];
                // SAFETY: AVX-512F checked above; n rows of d keys, count queries of d.
                unsafe { x86::scores_avx512(&keys[..n * d], &q, &mut got) };
                for (i, row) in got.iter().enumerate() {
                    for j in 0..n {
                        // SAFETY: as above.
                        let want = unsafe { x86::dot_avx512(&keys[j * d..][..d], q[i]) };
                        assert_eq!(
                            row[j].to_bits(),
                            want.to_bits(),
                            "d {d} q {i}/{count} key {j}/{n}"
                        );
                    }
                }
                let weights: Vec<[f32; KEY_BLOCK]> = (0..count)
                    .map(|i| std::array::from_fn(|j| 0.05 + ((i * 7 + j * 3) % 11) as f32 * 0.09))
                    .collect();
                let ms: Vec<f32> = (0..count).map(|i| [1.0, 0.625, 0.3][i % 3]).collect();
                let acc0: Vec<Vec<f32>> = (0..count).map(|i| values(d, 50 + i as u64)).collect();
                let mut accs = acc0.clone();
                let mut refs: Vec<&mut [f32]> = accs.iter_mut().map(|a| a.as_mut_slice()).collect();
                // SAFETY: AVX-512F checked above; count sums of d, n value rows of d.
                unsafe { x86::accumulate_many_avx512(&mut refs, &vals[..n * d], &ms, &weights, n) };
                for i in 0..count {
                    let mut want = acc0[i].clone();
                    accumulate(&mut want, &vals[..n * d], ms[i], &weights[i][..n]);
                    assert_eq!(accs[i], want, "d {d} q {i}/{count} n {n}");
                }
            }
        }
    }
}

#[test]
fn blocked_softmax_matches_f64_softmax() {
    // head_dim 64 takes 64-column register chunks on x86, 72 adds an 8-column one, 96
    // with 2 KV heads both; the window cuts blocks of keys at arbitrary offsets.
    for d in [64, 72, 96] {
        for mask in [Mask::Causal, Mask::Sliding(20), Mask::Bidirectional] {
            let dims = Heads {
                heads: 4,
                kv_heads: 2,
                head_dim: d,
            };
            let (n, row) = (100, 2 * d);
            let (k, v) = (values(n * row, 4), values(n * row, 5));
            let (kv, seq) = store(&k, &v, row, n);
            // Scores spread over ~±20 so the max moves inside and across key blocks.
            let q: Vec<f32> = values(n * 4 * d, 6).iter().map(|x| x * 3.0).collect();
            let got = attend(&q, kv.layer(seq, 0).unwrap(), 0, n, mask, dims);
            let want = naive(&q, &k, &v, 0, mask, dims);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-5,
                    "d {d} {mask:?} element {i}: {g} vs {w}"
                );
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn register_chunked_value_sums_match_the_portable_loop() {
    use crate::cpu::features::{test_kernels_at, Isa};
    if !test_kernels_at(Isa::Avx2, "attention value sums") {
        return;
    }
    for d in [64, 72, 200] {
        let acc0 = values(d, 9);
        let vals = values(d * 5, 10);
        let weights = [0.5, 0.25, 1.0, 0.125, 0.75];
        let mut wide = acc0.clone();
        // SAFETY: AVX2/FMA checked above; vals holds 5 rows of d.
        unsafe { x86::accumulate(&mut wide, &vals, 0.5, &weights) };
        let mut want = acc0.clone();
        accumulate_portable(&mut want, &vals, 0.5, &weights);
        assert_eq!(wide, want, "d {d}");
    }
}

#[test]
fn grouped_queries_give_each_query_its_own_softmax() {
    let dims = Heads {
        heads: 4,
        kv_heads: 2,
        head_dim: 32,
    };
    let row = dims.kv_heads * dims.head_dim;
    // Prefill from an empty cache past the tiled threshold, then a short continuation
    // (f16 sums) and a single decode step, with full and sliding windows.
    for (start, t) in [(0, 70), (70, 9), (79, 1)] {
        for mask in [Mask::Causal, Mask::Sliding(16)] {
            let n = start + t;
            let (k, v) = (values(n * row, 1), values(n * row, 2));
            let (kv, seq) = store(&k, &v, row, n);
            let q: Vec<f32> = values(t * dims.heads * dims.head_dim, 3 + t as u64)
                .iter()
                .map(|x| x * 2.0)
                .collect();
            let got = attend(&q, kv.layer(seq, 0).unwrap(), start, t, mask, dims);
            let want = naive(&q, &k, &v, start, mask, dims);
            // f16 rounding of queries and (below 64 queries) of the value sums.
            let tol = if t < TILED_FROM { 5e-3 } else { 1e-5 };
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= tol,
                    "start {start} t {t} {mask:?} element {i}: {g} vs {w}"
                );
            }
        }
    }
}

#[test]
fn a_q8_0_cache_attends_over_its_dequantized_keys_and_values() {
    use crate::quantized::format::{quantize_q8_0_ref, BlockQ8_0, GgmlBlock};
    let dims = Heads {
        heads: 4,
        kv_heads: 2,
        head_dim: 64,
    };
    let row = dims.kv_heads * dims.head_dim;
    let q8 = |xs: &[f32]| {
        let mut blocks = vec![
            BlockQ8_0 {
                d: f16::ZERO,
                qs: [0; 32]
            };
            xs.len() / 32
        ];
        quantize_q8_0_ref(xs, &mut blocks);
        let mut out = vec![0f32; xs.len()];
        BlockQ8_0::dequantize(&blocks, &mut out);
        out
    };
    // A prefill, a short continuation and a decode step: every one through f32 sums.
    for (start, t) in [(0, 70), (70, 9), (79, 1)] {
        for mask in [Mask::Causal, Mask::Sliding(16)] {
            let n = start + t;
            let (k, v) = (values(n * row, 41), values(n * row, 42));
            let (kv, seq) = store_as(KvDtype::Q8_0, &k, &v, row, n);
            let q: Vec<f32> = values(t * dims.heads * dims.head_dim, 43)
                .iter()
                .map(|x| x * 2.0)
                .collect();
            let got = attend(&q, kv.layer(seq, 0).unwrap(), start, t, mask, dims);
            let want = naive_with(|x| x as f64, &q, &q8(&k), &q8(&v), start, mask, dims);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-5,
                    "start {start} t {t} {mask:?} element {i}: {g} vs {w}"
                );
            }
        }
    }
}

/// The SIMD128 pieces against scalar loops with the same roundings (a product rounded, then
/// the sum: SIMD128 has no fused multiply-add), in the WebAssembly build itself.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
#[test]
fn simd128_kernels_match_scalar_loops() {
    // Rounding to f16: a spread of every exponent and mantissa, and each boundary (f16's
    // largest value and the midpoint past it, the smallest normal and subnormal, ties).
    let mut bits: Vec<u32> = (0..=u32::MAX).step_by(4093).collect();
    for b in [
        0x477f_e000u32,
        0x477f_efff,
        0x477f_f000,
        0x3880_0000,
        0x387f_ffff,
        0x3300_0000,
        0x3300_0001,
        0x3380_0000,
        0x3f80_1000,
        0x3f80_3000,
        0x7f80_0000,
        0x0000_0001,
    ] {
        bits.extend([b, b | 0x8000_0000]);
    }
    let xs: Vec<f32> = bits.iter().map(|&b| f32::from_bits(b)).collect();
    let mut rounded = xs.clone();
    rounded.truncate(xs.len() / 4 * 4);
    simd128::round_f16(&mut rounded);
    for (x, r) in xs.iter().zip(&rounded) {
        let want = f16::from_f32(*x).to_f32();
        assert!(
            r.to_bits() == want.to_bits() || (r.is_nan() && want.is_nan()),
            "{x:e} ({:#x}): {r:e} vs {want:e}",
            x.to_bits()
        );
    }

    let d = 256;
    let (a, b) = (values(d, 7), values(d, 8));
    let a16: Vec<f16> = a.iter().map(|&x| f16::from_f32(x)).collect();
    let a16_wide: Vec<f32> = a16.iter().map(|x| x.to_f32()).collect();
    // AVX2's order: lanes l of four 8-lane sums, `(s0 + s2) + (s1 + s3)`, the two halves,
    // then `(t0 + t1) + (t2 + t3)`.
    let mut s = [[0f32; 8]; 4];
    for (x, y) in a16_wide.chunks_exact(32).zip(b.chunks_exact(32)) {
        for (j, s) in s.iter_mut().enumerate() {
            for (l, s) in s.iter_mut().enumerate() {
                *s += x[8 * j + l] * y[8 * j + l];
            }
        }
    }
    let x0: Vec<f32> = (0..8)
        .map(|l| (s[0][l] + s[2][l]) + (s[1][l] + s[3][l]))
        .collect();
    let t: Vec<f32> = (0..4).map(|l| x0[l] + x0[l + 4]).collect();
    let want = (t[0] + t[1]) + (t[2] + t[3]);
    assert_eq!(simd128::dot(&a16, &b).to_bits(), want.to_bits());
    assert_eq!(simd128::dot(&a16_wide, &b).to_bits(), want.to_bits());

    let mut got = b.clone();
    simd128::mad_f16(&mut got, &a16, 0.37);
    let want: Vec<f32> = b
        .iter()
        .zip(&a16_wide)
        .map(|(b, a)| f16::from_f32(a * 0.37 + b).to_f32())
        .collect();
    assert_eq!(got, want);

    let vals = values(d * 5, 10);
    let weights = [0.5, 0.25, 1.0, 0.125, 0.75];
    let mut got = a.clone();
    simd128::accumulate(&mut got, &vals, 0.5, &weights);
    let mut want: Vec<f32> = a.iter().map(|x| x * 0.5).collect();
    for (row, w) in vals.chunks_exact(d).zip(weights) {
        for (acc, v) in want.iter_mut().zip(row) {
            *acc += v * w;
        }
    }
    assert_eq!(got, want);
}

/// The last queries of a run, attended in a call of their own (the first positions came from
/// a cached prefix), get what the whole run's call gives them, on both sides of the tiled
/// kernel's threshold.
#[test]
fn a_run_attended_in_pieces_equals_the_whole_run() {
    let dims = Heads {
        heads: 4,
        kv_heads: 2,
        head_dim: 32,
    };
    let (row, qrow) = (dims.kv_heads * dims.head_dim, dims.heads * dims.head_dim);
    for (n, first) in [(70, 64), (70, 32), (70, 69), (40, 16), (40, 39)] {
        for mask in [Mask::Causal, Mask::Sliding(16)] {
            let (k, v) = (values(n * row, 1), values(n * row, 2));
            let (kv, seq) = store(&k, &v, row, n);
            let q: Vec<f32> = values(n * qrow, 3).iter().map(|x| x * 2.0).collect();
            let whole = attend(&q, kv.layer(seq, 0).unwrap(), 0, n, mask, dims);
            let rest = &q[first * qrow..];
            let piece = attend(rest, kv.layer(seq, 0).unwrap(), first, n, mask, dims);
            assert!(
                piece == whole[first * qrow..],
                "{n} positions from {first}, {mask:?}"
            );
            if n >= TILED_FROM {
                // As a run of its own, the piece takes the per-query kernel.
                let alone = attend(
                    rest,
                    kv.layer(seq, 0).unwrap(),
                    first,
                    n - first,
                    mask,
                    dims,
                );
                assert!(
                    alone != whole[first * qrow..],
                    "{n} from {first}: same kernel?"
                );
            }
        }
    }
}
