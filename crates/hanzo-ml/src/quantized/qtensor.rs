//! `QTensor`: raw ggml blocks with a shape and a type, owned or borrowed from a shared `Blob`
//! (a memory map, or a model's bytes in memory).

use super::format::{afq, AfqType, GgmlBlock, GgmlDType};
use super::kernels::QuantizeRow;
use crate::cpu::par::for_each_chunk;
use crate::cpu::Blob;
use crate::{DType, Device, Error, Result, Shape, Tensor};
use std::sync::Arc;

/// Block bytes, aligned for every block type (4 bytes covers Q8_K's f32). Owned data is
/// kept in `u32` words for that alignment; mapped data is used in place when aligned.
#[derive(Clone)]
enum Bytes {
    Owned {
        words: Vec<u32>,
        len: usize,
    },
    Mapped {
        map: Arc<Blob>,
        offset: usize,
        len: usize,
    },
}

impl Bytes {
    fn owned(bytes: &[u8]) -> Self {
        let mut words = vec![0u32; bytes.len().div_ceil(4)];
        bytemuck::cast_slice_mut::<u32, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        Bytes::Owned {
            words,
            len: bytes.len(),
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Owned { words, len } => &bytemuck::cast_slice(words)[..*len],
            Bytes::Mapped { map, offset, len } => &map[*offset..*offset + *len],
        }
    }
}

#[derive(Clone)]
pub struct QTensor {
    dtype: GgmlDType,
    shape: Shape,
    data: Bytes,
    /// The bytes hold a `[n, k]` weight's rows eight at a time in `format::interleaved`'s
    /// layout, not row after row (`GgufFile::from_blob_interleaved`).
    interleaved: bool,
}

impl std::fmt::Debug for QTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "QTensor({}, {:?})", self.dtype, self.shape)
    }
}

fn check_size(dtype: GgmlDType, shape: &Shape, nbytes: usize, op: &'static str) -> Result<()> {
    let dims = shape.dims();
    let last = dims.last().copied().unwrap_or(1);
    if last % dtype.block_size() != 0 {
        return Err(Error::invalid(
            op,
            format!(
                "the last dim of {:?} is not a multiple of the {dtype} block size {}",
                dims,
                dtype.block_size()
            ),
        ));
    }
    // Checked: a shape from a file may hold dims whose product overflows.
    let count = dims
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| Error::invalid(op, format!("element count of {dims:?} overflows")))?;
    let want = dtype.bytes_for(count)?;
    if want != nbytes {
        return Err(Error::invalid(
            op,
            format!("{dtype} {dims:?} takes {want} bytes, got {nbytes}"),
        ));
    }
    Ok(())
}

impl QTensor {
    /// Wraps raw block bytes (copied into an aligned buffer).
    pub fn from_bytes(dtype: GgmlDType, shape: impl Into<Shape>, bytes: &[u8]) -> Result<Self> {
        let shape = shape.into();
        check_size(dtype, &shape, bytes.len(), "QTensor::from_bytes")?;
        Ok(Self {
            dtype,
            shape,
            data: Bytes::owned(bytes),
            interleaved: false,
        })
    }

    /// An AFQ weight `[n, k]` from MLX's three tensors: `packed` the bytes of its `u32` levels
    /// (`n · k · bits / 8`), `scales` and `biases` their 16-bit values (`n · k / group` each).
    pub fn from_mlx(
        t: AfqType,
        shape: impl Into<Shape>,
        packed: &[u8],
        scales: &[u16],
        biases: &[u16],
    ) -> Result<Self> {
        // Written where it will stay: a model's largest tensors are AFQ, and a loader that
        // holds one copy at a time stays within its memory budget.
        let (dtype, shape) = (GgmlDType::Afq(t), shape.into());
        let len = scales.len() * t.block_bytes();
        check_size(dtype, &shape, len, "QTensor::from_mlx")?;
        let mut words = vec![0u32; len.div_ceil(4)];
        afq::from_mlx_into(
            t,
            packed,
            scales,
            biases,
            &mut bytemuck::cast_slice_mut::<u32, u8>(&mut words)[..len],
        )?;
        Ok(Self {
            dtype,
            shape,
            data: Bytes::Owned { words, len },
            interleaved: false,
        })
    }

    /// MLX's three tensors' bytes of an AFQ tensor: levels (its `u32` words, little-endian),
    /// scales, biases; `None` for other types.
    pub fn to_mlx(&self) -> Option<(Vec<u8>, Vec<u8>, Vec<u8>)> {
        Some(afq::to_mlx(self.dtype.afq()?, self.data()))
    }

    /// A zero-copy view of `len` bytes of `map` at `offset` (copied if misaligned).
    pub(crate) fn from_mmap(
        dtype: GgmlDType,
        shape: Shape,
        map: Arc<Blob>,
        offset: usize,
        len: usize,
    ) -> Result<Self> {
        check_size(dtype, &shape, len, "QTensor::from_mmap")?;
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= map.len())
            .ok_or_else(|| Error::format("QTensor", "tensor data out of the file's bounds"))?;
        let data = if (map.as_ptr() as usize + offset).is_multiple_of(4) {
            Bytes::Mapped { map, offset, len }
        } else {
            Bytes::owned(&map[offset..end])
        };
        Ok(Self {
            dtype,
            shape,
            data,
            interleaved: false,
        })
    }

    /// Quantizes a float tensor (any float dtype; quantization itself runs in f32) with
    /// ggml's reference algorithm for `dtype`. The last dim must be a multiple of the block
    /// size.
    pub fn quantize(t: &Tensor, dtype: GgmlDType) -> Result<Self> {
        let shape = t.shape().clone();
        let last = shape.dims().last().copied().unwrap_or(1);
        if last % dtype.block_size() != 0 {
            return Err(Error::invalid(
                "QTensor::quantize",
                format!(
                    "the last dim of {:?} is not a multiple of the {dtype} block size {}",
                    shape.dims(),
                    dtype.block_size()
                ),
            ));
        }
        let xs = t.to_dtype(DType::F32)?.to_vec_flat::<f32>()?;
        Self::quantize_f32(&xs, shape, dtype)
    }

    /// Quantizes row-major f32 data of `shape`.
    pub fn quantize_f32(xs: &[f32], shape: impl Into<Shape>, dtype: GgmlDType) -> Result<Self> {
        let shape = shape.into();
        if xs.len() != shape.elem_count() {
            return Err(Error::invalid(
                "QTensor::quantize",
                format!("{} values for shape {:?}", xs.len(), shape.dims()),
            ));
        }
        if let Some(why) = dtype.quantize_unsupported() {
            return Err(Error::invalid("QTensor::quantize", why));
        }
        let nbytes = dtype.bytes_for(xs.len())?;
        let mut words = vec![0u32; nbytes.div_ceil(4)];
        {
            let bytes = &mut bytemuck::cast_slice_mut::<u32, u8>(&mut words)[..nbytes];
            match dtype.afq() {
                Some(t) => quantize_afq(t, xs, bytes),
                None => crate::with_block_type!(dtype, B => quantize_into::<B>(xs, bytes)),
            }
        }
        let data = Bytes::Owned { words, len: nbytes };
        check_size(dtype, &shape, nbytes, "QTensor::quantize")?;
        Ok(Self {
            dtype,
            shape,
            data,
            interleaved: false,
        })
    }

    /// Quantizes row-major f32 data of `shape` under an importance matrix, as `llama-quantize
    /// --imatrix` does: `importance` holds one weight per column for each matrix of the
    /// tensor (`cols` values for a 2-D tensor, `experts × cols` for a 3-D stack of experts,
    /// the layout of llama.cpp's imatrix files).
    pub fn quantize_f32_weighted(
        xs: &[f32],
        shape: impl Into<Shape>,
        dtype: GgmlDType,
        importance: &[f32],
    ) -> Result<Self> {
        let shape = shape.into();
        let cols = shape.dims().last().copied().unwrap_or(1);
        let rows = shape.elem_count() / cols.max(1);
        let matrices = importance.len() / cols.max(1);
        if cols == 0
            || !importance.len().is_multiple_of(cols)
            || matrices == 0
            || !rows.is_multiple_of(matrices)
        {
            return Err(Error::invalid(
                "QTensor::quantize_f32_weighted",
                format!(
                    "{} importance values do not fit a tensor of shape {:?} (one per column per matrix)",
                    importance.len(),
                    shape.dims()
                ),
            ));
        }
        if xs.len() != shape.elem_count() {
            return Err(Error::invalid(
                "QTensor::quantize_f32_weighted",
                format!("{} values for shape {:?}", xs.len(), shape.dims()),
            ));
        }
        use super::format::*;
        // Only the types whose quantizer uses the importance, each as one small function
        // behind the shared row loop (the binary has a size budget); the rest (ggml ignores
        // the importance for them, and the unwritable types' error) go to `quantize_f32`.
        macro_rules! row {
            ($B:ty) => {
                &|x: &[f32], w: &[f32], out: &mut [u8]| {
                    <$B>::quantize_row_weighted(x, w, bytemuck::cast_slice_mut(out))
                }
            };
        }
        let quantize_row: &RowFn = match dtype {
            _ if rows == 0 => return Self::quantize_f32(xs, shape, dtype),
            GgmlDType::Q4_0 => row!(BlockQ4_0),
            GgmlDType::Q4_1 => row!(BlockQ4_1),
            GgmlDType::Q5_0 => row!(BlockQ5_0),
            GgmlDType::Q5_1 => row!(BlockQ5_1),
            GgmlDType::Q2K => row!(BlockQ2K),
            GgmlDType::Q3K => row!(BlockQ3K),
            GgmlDType::Q4K => row!(BlockQ4K),
            GgmlDType::Q5K => row!(BlockQ5K),
            GgmlDType::Q6K => row!(BlockQ6K),
            GgmlDType::IQ4NL => row!(BlockIQ4NL),
            GgmlDType::IQ4XS => row!(BlockIQ4XS),
            GgmlDType::IQ3XXS => row!(BlockIQ3XXS),
            GgmlDType::IQ3S => row!(BlockIQ3S),
            GgmlDType::IQ2XXS => row!(BlockIQ2XXS),
            GgmlDType::IQ2XS => row!(BlockIQ2XS),
            GgmlDType::IQ2S => row!(BlockIQ2S),
            GgmlDType::IQ1S => row!(BlockIQ1S),
            GgmlDType::IQ1M => row!(BlockIQ1M),
            _ => return Self::quantize_f32(xs, shape, dtype),
        };
        if !cols.is_multiple_of(dtype.block_size()) {
            return Err(Error::invalid(
                "QTensor::quantize_f32_weighted",
                format!("rows of {cols} are not whole {dtype} blocks"),
            ));
        }
        let nbytes = dtype.bytes_for(xs.len())?;
        let mut words = vec![0u32; nbytes.div_ceil(4)];
        let bytes = &mut bytemuck::cast_slice_mut::<u32, u8>(&mut words)[..nbytes];
        let row_bytes = nbytes / rows;
        quantize_weighted_rows(
            xs,
            bytes,
            cols,
            row_bytes,
            importance,
            rows / matrices,
            quantize_row,
        );
        let data = Bytes::Owned { words, len: nbytes };
        check_size(dtype, &shape, nbytes, "QTensor::quantize_f32_weighted")?;
        Ok(Self {
            dtype,
            shape,
            data,
            interleaved: false,
        })
    }

    pub fn dtype(&self) -> GgmlDType {
        self.dtype
    }

    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    pub fn elem_count(&self) -> usize {
        self.shape.elem_count()
    }

    /// The same tensor, its bytes declared to be in the interleaved layout (checked when it
    /// is read).
    pub(crate) fn into_interleaved(self) -> Self {
        Self {
            interleaved: true,
            ..self
        }
    }

    /// Whether the bytes hold the weight's rows eight at a time, interleaved
    /// (`GgufFile::from_blob_interleaved`): `QMatMul` multiplies such a tensor with the
    /// interleaved kernels and `dequantize`/`dequantize_rows` read the layout, but `data` is
    /// not ggml's and `blocks` refuses it.
    pub fn is_interleaved(&self) -> bool {
        self.interleaved
    }

    /// The raw block bytes, as ggml stores them unless `is_interleaved`.
    pub fn data(&self) -> &[u8] {
        self.data.as_slice()
    }

    pub fn is_mapped(&self) -> bool {
        matches!(self.data, Bytes::Mapped { .. })
    }

    /// Tells the kernel this process will not read the mapped bytes for a while, so the pages
    /// wholly inside them leave its resident set. They stay valid: a later read brings the same
    /// bytes back from the file. File pages are unmapped (`MADV_DONTNEED`) and stay in the
    /// page cache, so the next process to load the model finds them there; pieces already
    /// moved onto anonymous huge pages (see `gguf::HugePages`) are offered for reclaim
    /// (`MADV_PAGEOUT`), which without swap leaves them be. For owned data, and off Linux,
    /// nothing happens.
    pub fn release_pages(&self) {
        self.release_bytes(0..self.data().len())
    }

    /// `release_pages` for the pages wholly inside bytes `range` of the data.
    pub fn release_bytes(&self, range: std::ops::Range<usize>) {
        #[cfg(not(target_os = "linux"))]
        let _ = range;
        #[cfg(target_os = "linux")]
        if let Bytes::Mapped { map, offset, len } = &self.data {
            if map.mmap().is_none() {
                return; // bytes in memory: nothing to read back from
            }
            const PAGE: usize = 4096;
            let (from, to) = (range.start.min(*len), range.end.min(*len));
            let start = (map.as_ptr() as usize + offset + from).next_multiple_of(PAGE);
            let end = (map.as_ptr() as usize + offset + to) & !(PAGE - 1);
            if end > start {
                // Held across the call: no piece moves onto anonymous memory meanwhile.
                let guard = crate::cpu::huge_pages::MOVED.lock();
                let advice = if *guard.as_deref().unwrap_or(&true) {
                    libc::MADV_PAGEOUT
                } else {
                    libc::MADV_DONTNEED
                };
                // SAFETY: [start, end) lies inside the live read-only file map. Before any
                // piece moved, every page there is a file page, which MADV_DONTNEED unmaps
                // and a later read maps again from the page cache with the same bytes;
                // MADV_PAGEOUT only reclaims what can be read back. Failure is harmless.
                unsafe {
                    libc::madvise(start as *mut libc::c_void, end - start, advice);
                }
            }
        }
    }

    /// The blocks, typed. Errors when `B` is not this tensor's type, or the blocks are
    /// interleaved.
    pub fn blocks<B: GgmlBlock>(&self) -> Result<&[B]> {
        if self.interleaved {
            return Err(self.not_row_by_row());
        }
        if B::DTYPE != self.dtype {
            return Err(Error::invalid(
                "QTensor::blocks",
                format!("tensor is {}, asked for {}", self.dtype, B::DTYPE),
            ));
        }
        bytemuck::try_cast_slice(self.data())
            .map_err(|e| Error::invalid("QTensor::blocks", e.to_string()))
    }

    /// All values as f32, row-major.
    pub fn dequantize_f32(&self) -> Result<Vec<f32>> {
        if self.interleaved {
            let rows: Vec<u32> = (0..self.shape.dims()[0] as u32).collect();
            return self.interleaved_rows(&rows);
        }
        let mut out = vec![0f32; self.elem_count()];
        if let Some(t) = self.dtype.afq() {
            afq::dequantize(t, self.data(), &mut out);
            return Ok(out);
        }
        crate::with_block_type!(self.dtype, B => {
            let blocks = self.blocks::<B>()?;
            dequantize_into::<B>(blocks, &mut out);
        });
        Ok(out)
    }

    /// An f32 tensor with the same values.
    pub fn dequantize(&self) -> Result<Tensor> {
        Tensor::from_vec(self.dequantize_f32()?, self.shape.clone(), &Device::Cpu)
    }

    /// Rows `ids` of a 2-D `[rows, cols]` tensor as an f32 `[ids.len(), cols]` tensor: an
    /// embedding lookup that touches only the rows it needs (the table stays quantized).
    pub fn dequantize_rows(&self, ids: &[u32]) -> Result<Tensor> {
        let &[rows, cols] = self.shape.dims() else {
            return Err(Error::invalid(
                "QTensor::dequantize_rows",
                format!("needs a 2-D tensor, got {:?}", self.shape.dims()),
            ));
        };
        check_row_ids("QTensor::dequantize_rows", ids, rows)?;
        if self.interleaved {
            return Tensor::from_vec(self.interleaved_rows(ids)?, (ids.len(), cols), &Device::Cpu);
        }
        let mut out = vec![0f32; ids.len() * cols];
        if let Some(t) = self.dtype.afq() {
            let row_bytes = cols / t.group() * t.block_bytes();
            for (&id, o) in ids.iter().zip(out.chunks_mut(cols.max(1))) {
                let start = id as usize * row_bytes;
                afq::dequantize(t, &self.data()[start..start + row_bytes], o);
            }
            return Tensor::from_vec(out, (ids.len(), cols), &Device::Cpu);
        }
        crate::with_block_type!(self.dtype, B => {
            let blocks = self.blocks::<B>()?;
            let per_row = cols / B::BLOCK_SIZE;
            for (&id, o) in ids.iter().zip(out.chunks_mut(cols.max(1))) {
                let start = id as usize * per_row;
                B::dequantize(&blocks[start..start + per_row], o);
            }
        });
        Tensor::from_vec(out, (ids.len(), cols), &Device::Cpu)
    }
}

impl QTensor {
    /// Rows `ids` (checked) of an interleaved `[n, k]` weight as f32, row after row, read
    /// through the interleaved weight `QMatMul` makes of it (one set of per-type code). The
    /// clone is cheap: interleaved tensors view the file's buffer (`from_blob_interleaved`).
    fn interleaved_rows(&self, ids: &[u32]) -> Result<Vec<f32>> {
        let k = self.shape.dims()[1];
        let view = super::cpu::interleaved::view(Arc::new(self.clone()))?;
        let mut out = vec![0f32; ids.len() * k];
        for (&id, o) in ids.iter().zip(out.chunks_exact_mut(k.max(1))) {
            view.dequantize_row(id as usize, o);
        }
        Ok(out)
    }

    #[cold]
    #[inline(never)]
    fn not_row_by_row(&self) -> Error {
        Error::invalid(
            "QTensor::blocks",
            format!(
                "{} tensor {:?} is stored eight rows interleaved, not row by row",
                self.dtype,
                self.shape.dims()
            ),
        )
    }
}

/// An error naming the first of `ids` past a table of `rows` rows.
pub(crate) fn check_row_ids(op: &'static str, ids: &[u32], rows: usize) -> Result<()> {
    match ids.iter().find(|&&i| i as usize >= rows) {
        Some(&bad) => Err(Error::invalid(
            op,
            format!("row {bad} out of range for {rows} rows"),
        )),
        None => Ok(()),
    }
}

/// Blocks per parallel task: enough work to amortise scheduling.
const PAR_BLOCKS: usize = 64;

// Both loops go through `cpu::par`'s one copy of rayon's machinery: a rayon chain here would
// be instantiated again for every block type.
fn dequantize_into<B: GgmlBlock>(blocks: &[B], out: &mut [f32]) {
    for_each_chunk(out, PAR_BLOCKS * B::BLOCK_SIZE, &|i, o| {
        B::dequantize(&blocks[i * PAR_BLOCKS..][..o.len() / B::BLOCK_SIZE], o)
    });
}

/// Quantizes one row under its importance into its bytes.
type RowFn = dyn Fn(&[f32], &[f32], &mut [u8]) + Sync;

/// Row by row: the legacy types' weights depend on the whole row.
fn quantize_weighted_rows(
    xs: &[f32],
    bytes: &mut [u8],
    cols: usize,
    row_bytes: usize,
    importance: &[f32],
    rows_per_matrix: usize,
    quantize_row: &RowFn,
) {
    let rows_per_task = (PAR_BLOCKS * 32).div_ceil(cols).max(1);
    for_each_chunk(bytes, rows_per_task * row_bytes, &|i, b| {
        for (r, out) in b.chunks_exact_mut(row_bytes).enumerate() {
            let row = i * rows_per_task + r;
            let qw = &importance[(row / rows_per_matrix) * cols..][..cols];
            quantize_row(&xs[row * cols..][..cols], qw, out);
        }
    });
}

/// With the SIMD quantizer where the type has one (the reference's exact bytes).
/// AFQ blocks of `xs`, a group per task's worth of rows at a time.
fn quantize_afq(t: AfqType, xs: &[f32], out: &mut [u8]) {
    const GROUPS_PER_TASK: usize = 256;
    let mut tasks: Vec<_> = xs
        .chunks(GROUPS_PER_TASK * t.group())
        .zip(out.chunks_mut(GROUPS_PER_TASK * t.block_bytes()))
        .collect();
    for_each_chunk(&mut tasks, 1, &|_, task| {
        let (x, o) = &mut task[0];
        afq::quantize(t, x, o)
    });
}

fn quantize_into<B: QuantizeRow>(xs: &[f32], bytes: &mut [u8]) {
    let blocks: &mut [B] = bytemuck::cast_slice_mut(bytes);
    let quantize = B::quantize_row();
    for_each_chunk(blocks, PAR_BLOCKS, &|i, b| {
        quantize(
            &xs[i * PAR_BLOCKS * B::BLOCK_SIZE..][..b.len() * B::BLOCK_SIZE],
            b,
        )
    });
}
