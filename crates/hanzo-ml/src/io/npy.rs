//! NumPy `.npy` (format versions 1.0, 2.0 and 3.0 read; 1.0, or 2.0 for huge headers, written)
//! and `.npz` (a zip of `.npy` entries, stored or deflated).
//!
//! Supported descriptors: `<f2 <f4 <f8 |u1 <u4 <i8 |b1` (bool reads as u8 0/1) and their
//! big-endian `>` forms, which are byte-swapped on read. Fortran-order arrays are transposed
//! into a C-contiguous tensor. The header is parsed by a strict, allocation-bounded parser:
//! lengths, shape products and the data size are all checked before anything is allocated.
//!
//! ```no_run
//! use hanzo_ml::{io::npy, Device, Tensor};
//! let t = Tensor::new(&[[1f32, 2.], [3., 4.]], &Device::Cpu)?;
//! t.write_npy("t.npy")?;
//! let back = Tensor::read_npy("t.npy")?;
//! npy::write_npz("both.npz", &[("a", &t), ("b", &back)])?;
//! let entries = npy::read_npz("both.npz")?; // [("a", ..), ("b", ..)]
//! # Ok::<(), hanzo_ml::Error>(())
//! ```

use super::{contiguous_bytes, ensure_little_endian};
use crate::{CpuStorage, DType, Error, Result, Tensor};
use half::f16;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

const MAGIC: &[u8; 6] = b"\x93NUMPY";
/// NumPy itself refuses headers over 10 000 bytes by default; allow more, but bounded.
const MAX_HEADER_LEN: usize = 1 << 20;
/// NumPy's maximum number of dimensions.
const MAX_RANK: usize = 64;
/// DEFLATE cannot expand data by more than ~1032x; a larger claimed size is a lie (zip bomb
/// or corruption), so refuse it before allocating.
const MAX_DEFLATE_RATIO: u64 = 1100;

/// Read a `.npy` file.
pub fn read_npy(path: impl AsRef<Path>) -> Result<Tensor> {
    let path = path.as_ref();
    let file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    let context = format!("npy file {}", path.display());
    read_npy_from(&mut BufReader::new(file), len, &context)
}

/// Parse an in-memory `.npy` image.
pub fn read_npy_bytes(bytes: &[u8]) -> Result<Tensor> {
    read_npy_from(&mut &bytes[..], bytes.len() as u64, "npy data")
}

/// Write `t` as a C-order `.npy` file (version 1.0, or 2.0 when the header needs it).
pub fn write_npy(t: &Tensor, path: impl AsRef<Path>) -> Result<()> {
    let mut w = BufWriter::new(std::fs::File::create(path)?);
    write_npy_to(t, &mut w)?;
    w.flush()?;
    Ok(())
}

/// The `.npy` image of `t`.
pub fn to_npy_bytes(t: &Tensor) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    write_npy_to(t, &mut v)?;
    Ok(v)
}

/// Read every array of a `.npz` file, in archive order, named without the `.npy` suffix (as
/// `np.load` does).
pub fn read_npz(path: impl AsRef<Path>) -> Result<Vec<(String, Tensor)>> {
    let path = path.as_ref();
    let context = format!("npz file {}", path.display());
    let file = std::fs::File::open(path)?;
    let zip_err = |e: zip::result::ZipError| Error::format(context.as_str(), e.to_string());
    let mut zip = zip::ZipArchive::new(BufReader::new(file)).map_err(zip_err)?;
    let mut out = Vec::with_capacity(zip.len());
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).map_err(zip_err)?;
        let raw = entry.name().to_string();
        let name = raw.strip_suffix(".npy").unwrap_or(&raw).to_string();
        let ctx = format!("{context}, entry '{raw}'");
        let size = entry.size();
        let limit = entry
            .compressed_size()
            .saturating_mul(MAX_DEFLATE_RATIO)
            .saturating_add(1024);
        if size > limit {
            return Err(Error::format(
                ctx,
                format!("implausible uncompressed size {size}"),
            ));
        }
        out.push((name, read_npy_from(&mut entry, size, &ctx)?));
    }
    Ok(out)
}

/// Write a `.npz` file with stored (uncompressed) entries, like `np.savez`.
pub fn write_npz(path: impl AsRef<Path>, tensors: &[(&str, &Tensor)]) -> Result<()> {
    write_npz_with(path.as_ref(), tensors, zip::CompressionMethod::Stored)
}

/// Write a `.npz` file with deflated entries, like `np.savez_compressed`.
pub fn write_npz_compressed(path: impl AsRef<Path>, tensors: &[(&str, &Tensor)]) -> Result<()> {
    write_npz_with(path.as_ref(), tensors, zip::CompressionMethod::Deflated)
}

impl Tensor {
    /// Read a `.npy` file (see [`read_npy`]).
    pub fn read_npy(path: impl AsRef<Path>) -> Result<Tensor> {
        read_npy(path)
    }

    /// Write this tensor as a `.npy` file (see [`write_npy`]).
    pub fn write_npy(&self, path: impl AsRef<Path>) -> Result<()> {
        write_npy(self, path)
    }
}

fn write_npz_with(
    path: &Path,
    tensors: &[(&str, &Tensor)],
    method: zip::CompressionMethod,
) -> Result<()> {
    let context = format!("npz file {}", path.display());
    let zip_err = |e: zip::result::ZipError| match e {
        zip::result::ZipError::Io(e) => Error::Io(e),
        e => Error::format(context.as_str(), e.to_string()),
    };
    for (i, (name, _)) in tensors.iter().enumerate() {
        if tensors[..i].iter().any(|(n, _)| n == name) {
            return Err(Error::invalid(
                "write_npz",
                format!("duplicate array name '{name}'"),
            ));
        }
    }
    let mut zip = zip::ZipWriter::new(BufWriter::new(std::fs::File::create(path)?));
    for (name, t) in tensors {
        let header = npy_header(t.dtype(), t.dims())?;
        let len = header.len() + t.elem_count() * t.dtype().size_in_bytes();
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(method)
            .large_file(len as u64 >= u32::MAX as u64);
        zip.start_file(format!("{name}.npy"), options)
            .map_err(zip_err)?;
        write_npy_to(t, &mut zip)?;
    }
    zip.finish().map_err(zip_err)?.flush()?;
    Ok(())
}

fn write_npy_to(t: &Tensor, w: &mut impl Write) -> Result<()> {
    ensure_little_endian("write_npy")?;
    let header = npy_header(t.dtype(), t.dims())?;
    let t = t.contiguous()?;
    w.write_all(&header)?;
    w.write_all(contiguous_bytes(&t)?)?;
    Ok(())
}

/// Magic, version, length and the padded header dict, so that the data starts 64-aligned.
fn npy_header(dtype: DType, dims: &[usize]) -> Result<Vec<u8>> {
    let descr = match dtype {
        DType::U8 => "|u1",
        DType::U32 => "<u4",
        DType::I64 => "<i8",
        DType::F16 => "<f2",
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        // NumPy has no standard descriptor for these.
        DType::BF16 | DType::F8E4M3 => {
            return Err(Error::UnsupportedDType {
                op: "write_npy",
                dtype,
            })
        }
    };
    let shape = match dims {
        [d] => format!("({d},)"),
        _ => format!(
            "({})",
            dims.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    let padded = |prefix: usize| (prefix + dict.len() + 1).div_ceil(64) * 64 - prefix;
    let (version, hlen) = match padded(10) {
        n if n <= u16::MAX as usize => (1u8, n),
        _ => (2, padded(12)),
    };
    let mut out = Vec::with_capacity(12 + hlen);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[version, 0]);
    if version == 1 {
        out.extend_from_slice(&(hlen as u16).to_le_bytes());
    } else {
        let hlen =
            u32::try_from(hlen).map_err(|_| Error::invalid("write_npy", "shape too long"))?;
        out.extend_from_slice(&hlen.to_le_bytes());
    }
    out.extend_from_slice(dict.as_bytes());
    out.resize(out.len() + hlen - dict.len() - 1, b' ');
    out.push(b'\n');
    Ok(out)
}

/// Element type as stored in the file.
struct Descr {
    dtype: DType,
    swap: bool,
    is_bool: bool,
}

struct Header {
    descr: Descr,
    fortran_order: bool,
    shape: Vec<usize>,
}

/// Read one array from `r`, which holds exactly `total_len` bytes.
fn read_npy_from(r: &mut impl Read, total_len: u64, context: &str) -> Result<Tensor> {
    ensure_little_endian(context)?;
    let fmt = |msg: String| Error::format(context, msg);
    let mut pre = [0u8; 8];
    read_exact(r, &mut pre, context)?;
    if &pre[..6] != MAGIC {
        return Err(fmt("missing the \\x93NUMPY magic".into()));
    }
    let len_bytes = match (pre[6], pre[7]) {
        (1, 0) => 2,
        (2, 0) | (3, 0) => 4,
        (ma, mi) => return Err(fmt(format!("unsupported format version {ma}.{mi}"))),
    };
    let mut lb = [0u8; 4];
    read_exact(r, &mut lb[..len_bytes], context)?;
    let hlen = u32::from_le_bytes(lb);
    let header_end = 8 + len_bytes as u64 + hlen as u64;
    if hlen as usize > MAX_HEADER_LEN || header_end > total_len {
        return Err(fmt(format!(
            "header length {hlen} exceeds the file or the limit"
        )));
    }
    let mut text = vec![0u8; hlen as usize];
    read_exact(r, &mut text, context)?;
    let header = parse_header(&text).map_err(fmt)?;
    let Header {
        descr,
        fortran_order,
        shape,
    } = header;

    let count = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    let nbytes = count.and_then(|c| c.checked_mul(descr.dtype.size_in_bytes()));
    let count = match (count, nbytes) {
        (Some(c), Some(n)) if header_end.checked_add(n as u64) == Some(total_len) => c,
        _ => {
            return Err(fmt(format!(
                "{} data bytes do not match shape {shape:?} of {}",
                total_len - header_end,
                descr.dtype
            )))
        }
    };
    let storage = match descr.dtype {
        DType::U8 => {
            let mut v = read_vec::<u8>(r, count, false, context)?;
            if descr.is_bool {
                v.iter_mut().for_each(|x| *x = (*x != 0) as u8);
            }
            CpuStorage::from_vec(v)
        }
        DType::U32 => CpuStorage::from_vec(read_vec::<u32>(r, count, descr.swap, context)?),
        DType::I64 => CpuStorage::from_vec(read_vec::<i64>(r, count, descr.swap, context)?),
        DType::F16 => CpuStorage::from_vec(read_vec::<f16>(r, count, descr.swap, context)?),
        DType::F32 => CpuStorage::from_vec(read_vec::<f32>(r, count, descr.swap, context)?),
        DType::F64 => CpuStorage::from_vec(read_vec::<f64>(r, count, descr.swap, context)?),
        d @ (DType::BF16 | DType::F8E4M3) => {
            return Err(fmt(format!("no npy descriptor for {d}")));
        }
    };
    // The claimed size of a zip entry may lie: insist the data ends where the shape says.
    // (Hitting the end is also when a zip entry's checksum is verified.)
    if r.read(&mut [0u8; 1]).map_err(|e| read_error(e, context))? != 0 {
        return Err(fmt("trailing bytes after the array data".into()));
    }
    if fortran_order && shape.len() > 1 {
        // Column-major data is the C-order array of the reversed shape, transposed back.
        let rev: Vec<usize> = shape.iter().rev().copied().collect();
        let perm: Vec<usize> = (0..shape.len()).rev().collect();
        Tensor::from_cpu_storage(storage, rev)?
            .permute(&perm)?
            .contiguous()
    } else {
        Tensor::from_cpu_storage(storage, shape)
    }
}

/// `read_exact`, with truncation and corrupt compressed data reported as format errors.
fn read_exact(r: &mut impl Read, buf: &mut [u8], context: &str) -> Result<()> {
    r.read_exact(buf).map_err(|e| read_error(e, context))
}

fn read_error(e: std::io::Error, context: &str) -> Error {
    match e.kind() {
        std::io::ErrorKind::UnexpectedEof => Error::format(context, "file is truncated"),
        std::io::ErrorKind::InvalidData => Error::format(context, e.to_string()),
        _ => Error::Io(e),
    }
}

/// Read `count` elements straight into their final buffer (no intermediate byte copy).
fn read_vec<T: bytemuck::Pod>(
    r: &mut impl Read,
    count: usize,
    swap: bool,
    context: &str,
) -> Result<Vec<T>> {
    let mut v: Vec<T> = Vec::new();
    v.try_reserve_exact(count)
        .map_err(|_| Error::format(context, format!("cannot allocate {count} elements")))?;
    v.resize(count, T::zeroed());
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut v);
    read_exact(r, bytes, context)?;
    if swap {
        bytes
            .chunks_exact_mut(std::mem::size_of::<T>())
            .for_each(<[u8]>::reverse);
    }
    Ok(v)
}

fn parse_descr(s: &str) -> std::result::Result<Descr, String> {
    let unsupported = || format!("unsupported dtype descriptor '{s}'");
    let (order, code) = match s.as_bytes().first() {
        Some(b'<' | b'>' | b'|' | b'=') => s.split_at(1),
        _ => return Err(unsupported()),
    };
    let (dtype, is_bool) = match code {
        "f2" => (DType::F16, false),
        "f4" => (DType::F32, false),
        "f8" => (DType::F64, false),
        "u1" => (DType::U8, false),
        "b1" => (DType::U8, true),
        "u4" => (DType::U32, false),
        "i8" => (DType::I64, false),
        _ => return Err(unsupported()),
    };
    // '|' means "byte order not applicable", which only holds for one-byte types.
    if order == "|" && dtype.size_in_bytes() > 1 {
        return Err(unsupported());
    }
    Ok(Descr {
        dtype,
        swap: order == ">" && dtype.size_in_bytes() > 1,
        is_bool,
    })
}

/// Parse the header dict, e.g. `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`.
/// Exactly these three keys, each once; trailing whitespace only.
fn parse_header(text: &[u8]) -> std::result::Result<Header, String> {
    let mut p = Parser { s: text, i: 0 };
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    p.expect(b'{')?;
    loop {
        if p.eat(b'}') {
            break;
        }
        let key = p.string()?;
        p.expect(b':')?;
        let dup = match key.as_str() {
            "descr" => descr.replace(parse_descr(&p.string()?)?).is_some(),
            "fortran_order" => fortran.replace(p.boolean()?).is_some(),
            "shape" => shape.replace(p.tuple()?).is_some(),
            k => return Err(format!("unexpected header key '{k}'")),
        };
        if dup {
            return Err(format!("duplicate header key '{key}'"));
        }
        if !p.eat(b',') {
            p.expect(b'}')?;
            break;
        }
    }
    p.ws();
    if p.i != text.len() {
        return Err("unexpected bytes after the header dict".into());
    }
    match (descr, fortran, shape) {
        (Some(descr), Some(fortran_order), Some(shape)) => Ok(Header {
            descr,
            fortran_order,
            shape,
        }),
        _ => Err("header lacks one of 'descr', 'fortran_order', 'shape'".into()),
    }
}

/// A cursor over the header bytes; every method skips leading whitespace.
struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while matches!(self.s.get(self.i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        self.ws();
        let hit = self.s.get(self.i) == Some(&c);
        self.i += hit as usize;
        hit
    }

    fn expect(&mut self, c: u8) -> std::result::Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!(
                "expected '{}' at header byte {}",
                c as char, self.i
            ))
        }
    }

    /// A quoted string without escapes (NumPy never writes any).
    fn string(&mut self) -> std::result::Result<String, String> {
        self.ws();
        let q = match self.s.get(self.i) {
            Some(&q @ (b'\'' | b'"')) => q,
            _ => return Err(format!("expected a string at header byte {}", self.i)),
        };
        let start = self.i + 1;
        let len = self.s[start..]
            .iter()
            .position(|&c| c == q || c == b'\\' || c == b'\n')
            .filter(|&n| self.s[start + n] == q)
            .ok_or("unterminated or escaped string in header")?;
        self.i = start + len + 1;
        Ok(String::from_utf8_lossy(&self.s[start..start + len]).into_owned())
    }

    fn boolean(&mut self) -> std::result::Result<bool, String> {
        self.ws();
        for (word, v) in [(&b"True"[..], true), (&b"False"[..], false)] {
            if self.s[self.i..].starts_with(word) {
                self.i += word.len();
                return Ok(v);
            }
        }
        Err(format!("expected True or False at header byte {}", self.i))
    }

    /// `()`, `(n,)` or `(a, b, ...)` with an optional trailing comma; Python 2 `L` suffixes ok.
    fn tuple(&mut self) -> std::result::Result<Vec<usize>, String> {
        self.expect(b'(')?;
        let mut dims = Vec::new();
        let mut trailing_comma = false;
        while !self.eat(b')') {
            if dims.len() == MAX_RANK {
                return Err(format!("shape has more than {MAX_RANK} dimensions"));
            }
            dims.push(self.int()?);
            trailing_comma = self.eat(b',');
            if !trailing_comma {
                self.expect(b')')?;
                break;
            }
        }
        // `(3)` is an int in Python, not a tuple.
        if dims.len() == 1 && !trailing_comma {
            return Err("shape (n) must be written (n,)".into());
        }
        Ok(dims)
    }

    fn int(&mut self) -> std::result::Result<usize, String> {
        self.ws();
        let start = self.i;
        let mut v = 0usize;
        while let Some(&c @ b'0'..=b'9') = self.s.get(self.i) {
            v = v
                .checked_mul(10)
                .and_then(|v| v.checked_add((c - b'0') as usize))
                .ok_or("shape dimension overflows")?;
            self.i += 1;
        }
        if self.i == start {
            return Err(format!("expected a dimension at header byte {start}"));
        }
        self.i += (self.s.get(self.i) == Some(&b'L')) as usize;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_alignment() {
        for dims in [vec![], vec![3], vec![2, 3, 4]] {
            let h = npy_header(DType::F32, &dims).unwrap();
            assert_eq!(h.len() % 64, 0);
            let hdr = parse_header(&h[10..]).unwrap();
            assert_eq!(hdr.shape, dims);
            assert!(!hdr.fortran_order);
        }
        // A header longer than u16::MAX switches to version 2.0.
        let h = npy_header(DType::U8, &[1; 30000]).unwrap();
        assert_eq!((h[6], h.len() % 64), (2, 0));
    }

    #[test]
    fn header_parser_rejects() {
        let bad: &[&[u8]] = &[
            b"",
            b"{",
            b"{'descr': '<f4', 'fortran_order': False}",
            b"{'descr': '<f4', 'fortran_order': False, 'shape': (3), }",
            b"{'descr': '<f4', 'fortran_order': Fals, 'shape': (3,), }",
            b"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (), }",
            b"{'descr': '<c8', 'fortran_order': False, 'shape': (), }",
            b"{'descr': '|f4', 'fortran_order': False, 'shape': (), }",
            b"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,), }",
            b"{'descr': '<f4', 'fortran_order': False, 'shape': (), 'x': 1}",
            b"{'descr': '<f4', 'fortran_order': False, 'shape': (), } junk",
            b"{'descr': '<f4\\', 'fortran_order': False, 'shape': (), }",
        ];
        for b in bad {
            assert!(parse_header(b).is_err(), "{}", String::from_utf8_lossy(b));
        }
        let ok =
            parse_header(b"{\"descr\": \">i8\", \"shape\": (2L, 3L), \"fortran_order\": True}\n");
        let ok = ok.unwrap();
        assert!(ok.fortran_order && ok.descr.swap && ok.shape == [2, 3]);
    }
}
