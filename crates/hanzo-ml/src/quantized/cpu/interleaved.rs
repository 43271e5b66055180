//! Decode and prefill over weights repacked eight rows at a time (`format::interleaved`): a
//! copy made on x86 with AVX2 (the interleaved kernels are 256 bits wide; AVX-512 CPUs run
//! them too, faster than their own row kernels for these types), or a file's
//! own bytes rearranged where they lie (`GgufFile::from_blob_interleaved`, as the SIMD128
//! WebAssembly builds load models).
//!
//! Decode runs the interleaved dot kernel over groups of eight rows; prefill reads the same
//! copy as GEMM panels (`gemm`), whose eight-row interleaving is the same, unpacked.
//! Those drivers (`matmul`, the decode `Job`) are written once over `GroupKernels`, what
//! they need of any eight-row layout; IQ4_XS's (`interleaved_iq4xs`) takes them too.

use super::gemm;
use super::matvec::MatvecJob;
use super::sink::{filled, Sink};
use super::Route;
use crate::cpu::par::{for_each_chunk, par_for};
use crate::quantized::format::interleaved::{dequantize_group_row, XRow, ROWS};
use crate::quantized::format::{BlockQ8_0, GgmlDType};
use crate::quantized::kernels::interleaved::{Ahead, InterleavedKernels};
use crate::quantized::kernels::{isa, Isa, QuantizeRow};
use crate::quantized::QTensor;
use crate::{Error, Result};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// `m` activation rows of width `k`, quantized once for every group of weight rows.
pub(crate) struct Activations {
    q: Vec<BlockQ8_0>,
    d: Vec<f32>,
    sum: Vec<i32>,
    blocks: usize,
}

impl Activations {
    fn new(x: &[f32], m: usize, k: usize) -> Self {
        let blocks = k / 32;
        let mut q = vec![<BlockQ8_0 as bytemuck::Zeroable>::zeroed(); m * blocks];
        let quantize = BlockQ8_0::quantize_row();
        for (q, x) in q
            .chunks_exact_mut(blocks.max(1))
            .zip(x.chunks_exact(k.max(1)))
        {
            quantize(x, q);
        }
        let d = q.iter().map(|b| b.d.to_f32()).collect();
        let sum = q
            .iter()
            .map(|b| b.qs.iter().map(|&v| v as i32).sum())
            .collect();
        Self { q, d, sum, blocks }
    }

    fn row(&self, j: usize) -> XRow<'_> {
        let r = j * self.blocks..(j + 1) * self.blocks;
        XRow {
            q: &self.q[r.clone()],
            d: &self.d[r.clone()],
            sum: &self.sum[r],
        }
    }
}

/// A `[n, k]` weight repacked: group `g` (rows `8g..8g + 8`) has its blocks at
/// `blocks()[g * k / 32..][..k / 32]`.
pub struct Interleaved<B: InterleavedKernels> {
    store: Store<B::X8>,
    n: usize,
    k: usize,
}

/// Where a repacked weight's blocks are.
enum Store<X> {
    /// A copy of the stored blocks.
    Copy(Vec<X>),
    /// A tensor whose own bytes were rearranged (`QTensor::is_interleaved`); checked to cast
    /// to blocks.
    InPlace(Arc<QTensor>),
}

impl<B: InterleavedKernels> std::fmt::Debug for Interleaved<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Interleaved({}, [{}, {}])", B::DTYPE, self.n, self.k)
    }
}

impl<B: InterleavedKernels> Interleaved<B> {
    /// Repacks `w` (`[n, k]`, row after row); `n` must be a multiple of 8.
    pub fn new(w: &[B], n: usize, k: usize) -> Result<Self> {
        Self::new_releasing(w, n, k, &|_| {})
    }

    /// As `new`, handing `release` the bytes of `w` copied so far (`0..end`, growing), so the
    /// caller can drop those pages while the rest is still being copied: the weight and its
    /// copy are never both resident in full (Gemma 3's 178 MB output head would otherwise add
    /// its whole size to the peak resident set for a moment). Always the whole prefix: a file
    /// mapped with 2 MiB pages gives a page back only once all of it is released.
    pub(crate) fn new_releasing(
        w: &[B],
        n: usize,
        k: usize,
        release: &(dyn Fn(std::ops::Range<usize>) + Sync),
    ) -> Result<Self> {
        let per_row = k / 32;
        if !n.is_multiple_of(ROWS) || !k.is_multiple_of(32) || w.len() != n * per_row {
            return Err(Error::invalid(
                "Interleaved::new",
                format!(
                    "{} weight [{n}, {k}] ({} blocks) does not split into groups of {ROWS} rows",
                    B::DTYPE,
                    w.len()
                ),
            ));
        }
        let blocks = repack(w, per_row, B::pack, release);
        count_repacked(std::mem::size_of_val(w));
        Ok(Self {
            store: Store::Copy(blocks),
            n,
            k,
        })
    }

    /// A tensor already in the interleaved layout (`QTensor::is_interleaved`), read where it
    /// is. Its bytes cast to blocks: they are whole groups (`fits`, and `QTensor` checked
    /// their length), and a tensor's bytes are 4-aligned.
    pub(crate) fn in_place(w: Arc<QTensor>) -> Result<Self> {
        let (n, k) = in_place_dims(&w, B::DTYPE)?;
        Ok(Self {
            store: Store::InPlace(w),
            n,
            k,
        })
    }

    fn blocks(&self) -> &[B::X8] {
        match &self.store {
            Store::Copy(blocks) => blocks,
            Store::InPlace(w) => bytemuck::cast_slice(w.data()),
        }
    }

    fn group(&self, g: usize) -> &[B::X8] {
        let per_row = self.k / 32;
        &self.blocks()[g * per_row..][..per_row]
    }

    /// `x [m, k]` times the weight transposed → `[m, n]` (see `matmul`).
    pub fn matmul(&self, x: &[f32], m: usize, route: Route) -> Vec<f32> {
        matmul(self, x, m, route)
    }
}

impl<B: InterleavedKernels> GroupKernels for Interleaved<B> {
    type Acts = Activations;
    type Row<'a> = XRow<'a>;
    fn max_level(&self) -> u8 {
        B::MAX_LEVEL
    }

    fn dims(&self) -> (usize, usize) {
        (self.n, self.k)
    }
    fn streamed(&self) -> bool {
        crate::quantized::kernels::prefetch::streamed(std::mem::size_of_val(self.blocks()))
    }
    fn quantize(&self, x: &[f32], m: usize) -> Activations {
        Activations::new(x, m, self.k)
    }
    fn row<'a>(&self, acts: &'a Activations, j: usize) -> XRow<'a> {
        acts.row(j)
    }
    fn dot<const C: usize>(&self, g: usize, x: &[XRow; C], ahead: Ahead) -> [[f32; ROWS]; C] {
        B::dot::<C>()(self.group(g), x, ahead)
    }
    fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        dequantize_group_row::<B>(self.group(r / ROWS), r % ROWS, out)
    }

    /// Writes rows `r0..r0 + live` (whole groups) unpacked into a GEMM panel (of 8 rows on
    /// AVX2, 16 on AVX-512); the rows past them are zero.
    fn unpack_panel(&self, s: &mut gemm::Scratch, r0: usize, live: usize) {
        let (rows, u, scale, min) = s.panel_for(live);
        let expand = B::expand();
        let mut levels = [0u8; 256];
        for half in 0..live / ROWS {
            for (i, b) in self.group(r0 / ROWS + half).iter().enumerate() {
                expand(b, &mut levels);
                place_steps(&levels, &mut u[i * 32 * rows..][..32 * rows], half);
                // The panels compute `s·u − min` per group.
                for (r, d) in B::scales(b).into_iter().enumerate() {
                    let at = i * rows + half * ROWS + r;
                    scale[at] = d;
                    min[at] = match B::mins(b) {
                        Some(m) => -m[r].to_f32(),
                        None => B::OFFSET as f32 * d,
                    };
                }
            }
        }
    }
}

/// One block's unpacked levels (8 steps of 4 levels of each of 8 rows) into its place in a
/// panel of `block.len() / 32` rows, as rows `8 half..8 half + 8`: a panel of 8 rows lays
/// them out as they are; a wider one takes them 32 bytes per step. One copy for every type.
#[inline(never)]
pub(super) fn place_steps(levels: &[u8; 256], block: &mut [u8], half: usize) {
    let rows = block.len() / 32;
    for (t, step) in levels.chunks_exact(32).enumerate() {
        block[(t * rows + half * ROWS) * 4..][..32].copy_from_slice(step);
    }
}

/// A weight held in groups of eight interleaved rows, whatever its block layout: what the
/// decode, small-batch and prefill drivers below need of it.
pub(crate) trait GroupKernels: Send + Sync + std::fmt::Debug {
    /// Activation rows quantized for the dot kernels.
    type Acts: Sync;
    /// One of those rows.
    type Row<'a>: Copy + Sync
    where
        Self: 'a;
    /// The largest unsigned level of the GEMM panels' form.
    fn max_level(&self) -> u8;

    /// `[n, k]`.
    fn dims(&self) -> (usize, usize);
    /// Larger than the last-level cache: decode streams it past the caches.
    fn streamed(&self) -> bool;
    /// `m` activation rows of width `k`, quantized once for every group.
    fn quantize(&self, x: &[f32], m: usize) -> Self::Acts;
    fn row<'a>(&self, acts: &'a Self::Acts, j: usize) -> Self::Row<'a>;
    /// `[c][r]` = row `8g + r` times activation row `c`.
    fn dot<const C: usize>(
        &self,
        g: usize,
        x: &[Self::Row<'_>; C],
        ahead: Ahead,
    ) -> [[f32; ROWS]; C];
    /// Row `r` as f32 (`out` holds `k` values): an embedding lookup in a tied output head.
    fn dequantize_row(&self, r: usize, out: &mut [f32]);
    /// Writes rows `r0..r0 + live` (whole groups) into a GEMM panel, levels in groups of 32;
    /// the rows past them are zero.
    fn unpack_panel(&self, s: &mut gemm::Scratch, r0: usize, live: usize);
}

/// Copies `w` (rows of `per_row` blocks, a multiple of eight of them) into groups of eight
/// rows, block `i` of each group's rows packed into one by `pack`, in parallel, handing
/// `release` the bytes of `w` copied so far (see `Interleaved::new_releasing`).
pub(super) fn repack<B: Sync, X: bytemuck::Pod + Send>(
    w: &[B],
    per_row: usize,
    pack: fn([&B; ROWS]) -> X,
    release: &(dyn Fn(std::ops::Range<usize>) + Sync),
) -> Vec<X> {
    /// Source bytes copied (in parallel) between two releases.
    const CHUNK_BYTES: usize = 4 << 20;
    let group_bytes = (ROWS * per_row * std::mem::size_of::<B>()).max(1);
    let chunk_groups = (CHUNK_BYTES / group_bytes).max(1);
    // On 2 MiB pages where the kernel allows: decode streams the copy once per token.
    let mut blocks = crate::cpu::alloc::zeroed_vec::<X>(w.len() / ROWS);
    let mut done = 0;
    for chunk in blocks.chunks_mut((chunk_groups * per_row).max(1)) {
        for_each_chunk(chunk, per_row, &|g, out| {
            let g = done + g;
            let rows: [&[B]; ROWS] =
                std::array::from_fn(|r| &w[(ROWS * g + r) * per_row..][..per_row]);
            for (i, o) in out.iter_mut().enumerate() {
                *o = pack(rows.map(|row| &row[i]));
            }
        });
        done += chunk.len() / per_row.max(1);
        release(0..done * group_bytes);
    }
    blocks
}

/// `x [m, k]` times the weight transposed → `[m, n]`: the GEMM panels where `route` takes
/// them (from `gemm::MIN_ROWS` rows for `ByRows`), otherwise every row as the decode kernel
/// computes it.
pub(super) fn matmul<G: GroupKernels>(w: &G, x: &[f32], m: usize, route: Route) -> Vec<f32> {
    let (n, k) = w.dims();
    let panels = match route {
        Route::Alone => false,
        Route::ByRows => m >= gemm::MIN_ROWS,
        Route::Panels => true,
    };
    if let Some(plan) = gemm::plan_prepacked(k, 32, w.max_level(), ROWS).filter(|_| panels) {
        let fill = |s: &mut gemm::Scratch, r0: usize, live: usize| w.unpack_panel(s, r0, live);
        if let Some(out) = gemm::over_panels(n, k, x, m, 32, plan, &fill) {
            return out;
        }
    }
    let acts = w.quantize(x, m);
    let rows: Vec<G::Row<'_>> = (0..m).map(|j| w.row(&acts, j)).collect();
    // Tasks of whole groups, each writing its rows' outputs straight into `[m, n]`.
    let groups = n / ROWS;
    let per_task = super::matvec::chunk_rows(n, crate::cpu::team::global().threads()) / ROWS;
    // SAFETY: the tasks cover groups 0..n / 8, so every row of the weight, and each writes
    // its rows' outputs for all m activation rows: all m · n elements.
    unsafe {
        filled(m * n, |sink| {
            par_for(groups.div_ceil(per_task), &|t| {
                for g in t * per_task..groups.min((t + 1) * per_task) {
                    group_times(w, g, &rows, sink)
                }
            })
        })
    }
}

/// Rows `8g..8g + 8` times every activation row `j`, eight activation rows at a time, into
/// `out[j * n + 8g..]`. Only the first call over the group asks for the blocks ahead: the
/// later ones find the group in L1.
fn group_times<G: GroupKernels>(w: &G, g: usize, x: &[G::Row<'_>], out: &Sink) {
    let n = w.dims().0;
    let at = |j: usize| j * n + ROWS * g;
    let mut ahead = Ahead::for_weight(w.streamed());
    let mut j = 0;
    while j < x.len() {
        let put = |y: &[[f32; ROWS]]| {
            for (c, y) in y.iter().enumerate() {
                // SAFETY: only group g's task writes its rows' outputs.
                unsafe { out.write(at(j + c), y) };
            }
            y.len()
        };
        let rows = &x[j..];
        j += match rows.len() {
            8.. => put(&w.dot::<8>(g, rows[..8].try_into().expect("eight"), ahead)),
            4..=7 => put(&w.dot::<4>(g, rows[..4].try_into().expect("four"), ahead)),
            _ => put(&w.dot::<1>(g, rows[..1].try_into().expect("one"), ahead)),
        };
        ahead = Ahead::Nothing;
    }
}

/// A repacked weight behind one type, whatever its block type.
pub(crate) trait RowGroups: Send + Sync + std::fmt::Debug {
    /// The decode product with one activation row, for `qmatmul::matvec_many`.
    fn job<'a>(&'a self, x: &[f32]) -> Box<dyn MatvecJob + 'a>;
    /// `x [m, k]` times the weight transposed, by `route` (`Route::Alone` computes every
    /// row as the matvec would, see `matvec::matmul_rows_alone`).
    fn matmul(&self, x: &[f32], m: usize, route: Route) -> Vec<f32>;
    /// Row `r` as f32 into `out` (`k` values).
    fn dequantize_row(&self, r: usize, out: &mut [f32]);
}

impl<G: GroupKernels> RowGroups for G {
    fn job<'a>(&'a self, x: &[f32]) -> Box<dyn MatvecJob + 'a> {
        Box::new(Job {
            w: self,
            x: self.quantize(x, 1),
            ahead: Ahead::for_weight(self.streamed()),
        })
    }
    fn matmul(&self, x: &[f32], m: usize, route: Route) -> Vec<f32> {
        matmul(self, x, m, route)
    }
    fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        GroupKernels::dequantize_row(self, r, out)
    }
}

struct Job<'a, G: GroupKernels> {
    w: &'a G,
    x: G::Acts,
    ahead: Ahead,
}

impl<G: GroupKernels> MatvecJob for Job<'_, G> {
    fn rows(&self) -> usize {
        self.w.dims().0
    }

    fn run(&self, r0: usize, out: &mut [f32]) {
        debug_assert!(r0.is_multiple_of(ROWS) && out.len().is_multiple_of(ROWS));
        let x = [self.w.row(&self.x, 0)];
        for (g, y) in out.chunks_exact_mut(ROWS).enumerate() {
            y.copy_from_slice(&self.w.dot::<1>(r0 / ROWS + g, &x, self.ahead)[0]);
        }
    }
}

/// `[n, k]` of an interleaved `dtype` weight (checked once for every type).
fn in_place_dims(w: &QTensor, dtype: GgmlDType) -> Result<(usize, usize)> {
    match w.shape().dims() {
        &[n, k] if w.is_interleaved() && w.dtype() == dtype && fits(dtype, n, k) => Ok((n, k)),
        d => Err(Error::invalid(
            "Interleaved::in_place",
            format!(
                "{} tensor {d:?} is not a {dtype} weight stored interleaved",
                w.dtype()
            ),
        )),
    }
}

/// A tensor already in the interleaved layout (`QTensor::is_interleaved`), read where it is.
pub(crate) fn view(w: Arc<QTensor>) -> Result<Box<dyn RowGroups>> {
    use crate::quantized::format::interleaved::with_interleave_type;
    Ok(with_interleave_type!(w.dtype(), B => {
        Box::new(Interleaved::<B>::in_place(w)?)
    }, _ => return Err(Error::invalid(
        "QMatMul",
        format!("{} weights are never interleaved", w.dtype()),
    ))))
}

/// Whether a `dtype` weight of `n` rows by `k` can be repacked: Q4_0, Q4_1, Q5_0, Q5_1,
/// Q8_0, IQ4_NL or MXFP4, in whole groups of eight rows.
pub(crate) fn fits(dtype: GgmlDType, n: usize, k: usize) -> bool {
    use GgmlDType as T;
    matches!(
        dtype,
        T::Q4_0 | T::Q4_1 | T::Q5_0 | T::Q5_1 | T::Q8_0 | T::IQ4NL | T::MXFP4
    ) && n.is_multiple_of(ROWS)
        && k.is_multiple_of(32)
}

/// Whether `QMatMul` can repack a `dtype` weight of `n` rows by `k` into a copy: the types
/// that `fit`, and those of IQ4_XS's layout in whole groups of eight rows
/// (`interleaved_iq4xs`, never in place: the SIMD128 builds have no kernels for it).
pub(crate) fn repacks(dtype: GgmlDType, n: usize, k: usize) -> bool {
    fits(dtype, n, k) || iq4xs_layout(dtype) && super::interleaved_iq4xs::fits(n, k)
}

/// Whether `dtype` is repacked into IQ4_XS's eight-row layout: IQ4_XS, and IQ3_S and IQ3_XXS
/// transcoded (`format::interleaved_iq4xs`; 136 bytes per 256 weights against their 110 and
/// 98, for a decode kernel several times as fast as theirs).
pub(crate) fn iq4xs_layout(dtype: GgmlDType) -> bool {
    matches!(
        dtype,
        GgmlDType::IQ4XS | GgmlDType::IQ3S | GgmlDType::IQ3XXS
    )
}

/// Whether `QMatMul` repacks a `dtype` weight of `n` rows by `k` into a copy: where it
/// `repacks` and the CPU has AVX2 (with AVX-512 too: on Zen 4 the 256-bit interleaved kernels
/// decode Q4_1 and Q5_0 at 2–4x, Q8_0 at 1.1–1.5x, its row kernels' rate, `decode_kernels`),
/// unless `HANZO_INTERLEAVE=0`. (In WebAssembly, where memory never shrinks, a copy would
/// hold the weight twice; the SIMD128 builds load files interleaved in place instead.)
pub(crate) fn pays(dtype: GgmlDType, n: usize, k: usize) -> bool {
    repacks(dtype, n, k) && repacks_here()
}

/// Whether this process repacks weights into copies at all: the CPU and `HANZO_INTERLEAVE`
/// half of `pays`.
pub fn repacks_here() -> bool {
    matches!(isa(), Isa::Avx2 | Isa::AvxVnni | Isa::Avx512) && crate::env::interleave()
}

static REPACKED_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Bytes of weights this process has repacked so far, copied or in place (never decreases).
pub fn repacked_bytes() -> usize {
    REPACKED_BYTES.load(Ordering::Relaxed)
}

pub(crate) fn count_repacked(bytes: usize) {
    REPACKED_BYTES.fetch_add(bytes, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantized::format::interleaved::{dot_scalar, BlockMXFP4x8};
    use crate::quantized::format::{
        e8m0_half, BlockIQ4NL, BlockMXFP4, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1,
    };
    use half::f16;
    use rand::{Rng, SeedableRng};

    fn random_blocks<B: InterleavedKernels>(rng: &mut rand::rngs::StdRng, count: usize) -> Vec<B> {
        let x: Vec<f32> = (0..count * 32).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let mut w = vec![<B as bytemuck::Zeroable>::zeroed(); count];
        B::quantize(&x, &mut w);
        w
    }

    /// A block's scale, read from its bytes: an f16 in the first two, or MXFP4's exponent
    /// in the first.
    fn orig_scale<B: InterleavedKernels>(b: &B) -> f32 {
        match bytemuck::bytes_of(b) {
            [e, ..] if B::DTYPE == GgmlDType::MXFP4 => e8m0_half(*e),
            [lo, hi, ..] => f16::from_le_bytes([*lo, *hi]).to_f32(),
            _ => unreachable!("blocks are longer than two bytes"),
        }
    }

    /// Eight rows whose every level is the largest (`top`) or the smallest, scales 1, and
    /// that unsigned level.
    fn extreme_block<B: InterleavedKernels>(top: bool) -> (B::X8, u8) {
        let mut one = <B as bytemuck::Zeroable>::zeroed();
        let bytes = bytemuck::bytes_of_mut(&mut one);
        // Stored as unsigned bits except Q8_0's signed bytes: 127 on top, -128 at the bottom;
        // MXFP4's largest value (12) is index 7, its smallest (-12) index 15.
        bytes.fill(match (top, B::DTYPE) {
            (true, GgmlDType::Q8_0) => 0x7F,
            (false, GgmlDType::Q8_0) => 0x80,
            (true, GgmlDType::MXFP4) => 0x77,
            (false, GgmlDType::MXFP4) => 0xFF,
            (true, _) => 0xFF,
            (false, _) => 0x00,
        });
        if B::DTYPE == GgmlDType::MXFP4 {
            bytes[0] = 128; // e8m0_half(128) = 1
        } else {
            bytes[..2].copy_from_slice(&f16::ONE.to_le_bytes());
        }
        if matches!(B::DTYPE, GgmlDType::Q4_1 | GgmlDType::Q5_1) {
            // Its min (bytes 2..4): zero, so the sums below are the levels' alone.
            bytes[2..4].fill(0);
        }
        // IQ4_NL's extreme indices give its table's ends (113 and -127), not 255 and 0.
        let level = match (top, B::DTYPE) {
            (true, GgmlDType::IQ4NL) => 113 + 128,
            (false, GgmlDType::IQ4NL) => 1,
            (true, _) => B::MAX_LEVEL,
            (false, _) => 0,
        };
        assert_eq!(one.levels(), [level; 32]);
        (B::pack([&one; ROWS]), level)
    }

    /// Every level and scale comes back from the repacked block where the layout says.
    fn round_trip<B: InterleavedKernels>() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let (n, k) = (16, 96);
        let w = random_blocks::<B>(&mut rng, n * k / 32);
        let p = Interleaved::new(&w, n, k).unwrap();
        for g in 0..n / ROWS {
            for (i, b) in p.group(g).iter().enumerate() {
                let steps = B::unpack(b);
                let mut expanded = [0u8; 256];
                B::expand()(b, &mut expanded);
                assert_eq!(
                    &expanded[..],
                    steps.as_flattened(),
                    "{}: SIMD expansion",
                    B::DTYPE
                );
                for r in 0..ROWS {
                    let orig = &w[(g * ROWS + r) * (k / 32) + i];
                    assert_eq!(B::scales(b)[r], orig_scale(orig));
                    let levels = orig.levels();
                    for j in 0..32 {
                        assert_eq!(
                            steps[j / 4][4 * r + j % 4],
                            levels[j],
                            "{} row {r} level {j}",
                            B::DTYPE
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn repacking_keeps_every_level_and_scale() {
        round_trip::<BlockQ4_0>();
        round_trip::<BlockQ4_1>();
        round_trip::<BlockQ5_0>();
        round_trip::<BlockQ5_1>();
        round_trip::<BlockQ8_0>();
        round_trip::<BlockIQ4NL>();
        round_trip::<BlockMXFP4>();
    }

    /// The SIMD kernels of every level this CPU has against the portable one, bit for bit,
    /// including the largest levels against ±127 activations (the i16 sums' worst case).
    fn kernels_agree<B: InterleavedKernels>() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        let blocks = 16;
        let mut w = random_blocks::<B>(&mut rng, ROWS * blocks);
        let mut packed = Interleaved::new(&w, ROWS, 32 * blocks).unwrap();
        let (top, top_level) = extreme_block::<B>(true);
        let (bottom, bottom_level) = extreme_block::<B>(false);
        let Store::Copy(copy) = &mut packed.store else {
            unreachable!("a copy")
        };
        copy[0] = top;
        copy[1] = bottom;
        if B::DTYPE == GgmlDType::MXFP4 {
            // Exponents 0 to 169 spread over the other blocks (larger ones would overflow the
            // sums to infinities; `interleaved_x86`'s test checks every scale alone).
            let copy: &mut [BlockMXFP4x8] = bytemuck::cast_slice_mut(copy);
            for (i, b) in copy.iter_mut().enumerate().skip(2) {
                b.e = std::array::from_fn(|r| (19 * (ROWS * (i - 2) + r) % 170) as u8);
            }
        }
        w.clear();
        // Blocks 0 and 1 of activation row 0 are all +1 and of row 1 all -1 (levels ±127).
        let width = 32 * blocks;
        let xs: Vec<f32> = (0..8 * width)
            .map(|i| match (i / width, i % width < 64) {
                (0, true) => 1.0,
                (1, true) => -1.0,
                _ => rng.gen_range(-2.0..2.0),
            })
            .collect();
        let acts = Activations::new(&xs, 8, 32 * blocks);
        let all: [XRow; 8] = std::array::from_fn(|j| acts.row(j));
        let rows: [XRow; 4] = std::array::from_fn(|j| acts.row(j));
        for isa in Isa::available() {
            let at = format!("{} at {}", B::DTYPE, isa.name());
            assert_eq!(
                B::dot_for::<8>(isa)(packed.blocks(), &all, Ahead::Nothing),
                dot_scalar::<B, 8>(packed.blocks(), &all),
                "{at}"
            );
            assert_eq!(
                B::dot_for::<4>(isa)(packed.blocks(), &rows, Ahead::Cached),
                dot_scalar::<B, 4>(packed.blocks(), &rows),
                "{at}"
            );
            assert_eq!(
                B::dot_for::<1>(isa)(packed.blocks(), &[rows[1]], Ahead::Streamed),
                dot_scalar::<B, 1>(packed.blocks(), &[rows[1]]),
                "{at}"
            );
        }
        // The extreme blocks alone: the exact integer sums, scaled by the activation scale.
        for (i, u) in [(0, top_level as i32), (1, bottom_level as i32)] {
            let one = dot_scalar::<B, 4>(
                &packed.blocks()[i..i + 1],
                &std::array::from_fn(|j| XRow {
                    q: &rows[j].q[i..i + 1],
                    d: &rows[j].d[i..i + 1],
                    sum: &rows[j].sum[i..i + 1],
                }),
            );
            for (j, sign) in [(0, 1), (1, -1)] {
                let want = sign * 32 * 127 * (u - B::OFFSET);
                assert_eq!(
                    one[j],
                    [rows[j].d[i] * want as f32; ROWS],
                    "{} block {i}",
                    B::DTYPE
                );
            }
        }
    }

    #[test]
    fn simd_kernels_equal_the_portable_one() {
        for isa in [Isa::Avx2, Isa::AvxVnni, Isa::Avx512] {
            crate::cpu::features::test_kernels_at(isa, "interleaved dot kernels");
        }
        kernels_agree::<BlockQ4_0>();
        kernels_agree::<BlockQ4_1>();
        kernels_agree::<BlockQ5_0>();
        kernels_agree::<BlockQ5_1>();
        kernels_agree::<BlockQ8_0>();
        kernels_agree::<BlockIQ4NL>();
        kernels_agree::<BlockMXFP4>();
    }
}
