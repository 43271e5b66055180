//! llama.cpp's importance-matrix files, as `llama-imatrix` writes them: the GGUF form (per
//! weight a `NAME.in_sum2` tensor of summed squared activations, one row per matrix, and a
//! `NAME.counts` tensor with each matrix's token count; metadata `imatrix.datasets`,
//! `imatrix.chunk_count`, `imatrix.chunk_size`) and the legacy `.dat` form (a count of
//! entries, then per entry its name, call count and values, then optionally the chunk count
//! and dataset name). Either becomes, per weight, the mean squared activation of each column,
//! computed as `llama-quantize` computes it.

use anyhow::{bail, ensure, Context, Result};
use hanzo_ml::quantized::gguf::{GgufFile, Value};
use hanzo_ml::quantized::GgmlDType;
use std::path::Path;

pub struct ImportanceMatrix {
    /// Weight name and importance per column, one row of `cols` per matrix (expert).
    entries: Vec<(String, Vec<f32>)>,
    /// The calibration texts' names, as `llama-imatrix` recorded them.
    pub datasets: Vec<String>,
    /// Chunks of calibration text the sums cover (0 where the file does not say).
    pub chunk_count: u32,
}

impl ImportanceMatrix {
    pub fn load(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let m = if bytes.starts_with(b"GGUF") {
            drop(bytes);
            Self::from_gguf(path)
        } else {
            Self::from_legacy(&bytes)
        }
        .with_context(|| format!("{} is not a usable importance matrix", path.display()))?;
        if let Some((name, v)) = m
            .entries
            .iter()
            .find_map(|(k, v)| v.iter().find(|x| !x.is_finite()).map(|x| (k, x)))
        {
            bail!(
                "{}: the importance of {name} holds the non-finite value {v}",
                path.display()
            );
        }
        Ok(m)
    }

    fn from_gguf(path: &Path) -> Result<Self> {
        let file = GgufFile::open(path)?;
        let (datasets, chunk_count, chunk_size) = (
            file.get("imatrix.datasets"),
            file.get("imatrix.chunk_count"),
            file.get("imatrix.chunk_size"),
        );
        ensure!(
            datasets.is_some() && chunk_count.is_some() && chunk_size.is_some(),
            "a GGUF importance matrix needs the imatrix.datasets, imatrix.chunk_count and \
             imatrix.chunk_size metadata (is this a model rather than an imatrix?)"
        );
        let datasets = match datasets.and_then(Value::as_array) {
            Some(a) => a.as_strings().map(<[String]>::to_vec).unwrap_or_default(),
            None => Vec::new(),
        };
        let chunk_count = chunk_count.and_then(Value::to_u64).unwrap_or(0) as u32;
        let mut entries = Vec::new();
        for t in file.tensor_infos() {
            let has = |n: &str| file.content().tensor_info(n).is_some();
            if let Some(name) = t.name.strip_suffix(".counts") {
                ensure!(
                    has(&format!("{name}.in_sum2")),
                    "{name} has counts without sums"
                );
                continue;
            }
            let Some(name) = t.name.strip_suffix(".in_sum2") else {
                continue;
            };
            let counts_name = format!("{name}.counts");
            ensure!(has(&counts_name), "{name} has sums without counts");
            let (sums, counts) = (f32s(&file, &t.name)?, f32s(&file, &counts_name)?);
            ensure!(
                !counts.is_empty() && sums.len() % counts.len() == 0,
                "{name}: {} sums do not split into {} matrices",
                sums.len(),
                counts.len()
            );
            let cols = sums.len() / counts.len();
            let mut values = Vec::with_capacity(sums.len());
            for (row, &count) in sums.chunks_exact(cols).zip(&counts) {
                // llama.cpp rounds the counts to integers; a matrix no token reached gets
                // importance 1 throughout.
                let count = count.round() as i64 as f32;
                if count > 0.0 {
                    values.extend(row.iter().map(|s| s / count));
                } else {
                    values.extend(std::iter::repeat_n(1.0, cols));
                }
            }
            entries.push((name.to_string(), values));
        }
        ensure!(!entries.is_empty(), "it holds no importance tensors");
        Ok(Self {
            entries,
            datasets,
            chunk_count,
        })
    }

    fn from_legacy(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader { bytes, at: 0 };
        let n = r.i32().context("no entry count")?;
        ensure!(
            n >= 1,
            "neither a GGUF file nor a legacy imatrix (entry count {n})"
        );
        let mut entries = Vec::new();
        for i in 0..n {
            let what = |s: &str| format!("entry {} of {n}: {s}", i + 1);
            let len = r.len().with_context(|| what("its name's length"))?;
            let name = std::str::from_utf8(r.take(len).with_context(|| what("its name"))?)
                .with_context(|| what("a name that is not UTF-8"))?
                .to_string();
            let ncall = r.i32().with_context(|| what("its call count"))?;
            let nval = r.len().with_context(|| what("its value count"))?;
            ensure!(nval >= 1, "{}", what("no values"));
            let raw = r.take(nval * 4).with_context(|| what("its values"))?;
            let mut values = le_f32s(raw);
            // The sums were stored as (sum / count) · ncall.
            if ncall > 0 {
                values.iter_mut().for_each(|v| *v /= ncall as f32);
            }
            entries.push((name, values));
        }
        // Optional trailer: chunk count, then the dataset's name.
        let chunk_count = r.i32().map_or(0, |c| c.max(0) as u32);
        let datasets = match r.len() {
            Ok(len) if len > 0 => r
                .take(len)
                .ok()
                .map(|b| vec![String::from_utf8_lossy(b).into_owned()])
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        Ok(Self {
            entries,
            datasets,
            chunk_count,
        })
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Keeps the entries whose names contain one of `include` (when given), then drops those
    /// that contain one of `exclude`, as llama-quantize's `--include-weights` and
    /// `--exclude-weights` do.
    pub fn filter(&mut self, include: &[String], exclude: &[String]) {
        self.entries.retain(|(name, _)| {
            (include.is_empty() || include.iter().any(|s| name.contains(s.as_str())))
                && !exclude.iter().any(|s| name.contains(s.as_str()))
        });
    }

    /// The importance for weight `name` of row-major `shape`: `None` where the file has no
    /// entry (the weight is quantized without one, as llama-quantize does), an error where the
    /// entry's size does not fit the weight (a matrix made for another model). A token
    /// embedding, which `llama-imatrix` never sees as a matrix product, is let through.
    pub fn for_tensor(&self, name: &str, shape: &[usize]) -> Result<Option<&[f32]>> {
        // The last entry of a name wins, as in llama.cpp.
        let Some((_, v)) = self.entries.iter().rev().find(|(n, _)| n == name) else {
            return Ok(None);
        };
        let cols = shape.last().copied().unwrap_or(1);
        let matrices = if shape.len() == 3 { shape[0] } else { 1 };
        if v.len() == cols * matrices {
            return Ok(Some(v));
        }
        if super::policy::category(name) == super::policy::Category::TokenEmbd {
            return Ok(None);
        }
        bail!(
            "the importance matrix has {} values for {name}, whose shape {shape:?} needs {} \
             (was it made for another model?)",
            v.len(),
            cols * matrices
        )
    }

    /// The metadata llama-quantize records in a file quantized with an importance matrix.
    pub fn metadata(&self, path: &Path) -> Vec<(String, Value)> {
        let mut m = vec![(
            "quantize.imatrix.file".to_string(),
            Value::String(path.display().to_string()),
        )];
        if let Some(d) = self.datasets.first() {
            m.push(("quantize.imatrix.dataset".into(), Value::String(d.clone())));
        }
        m.push((
            "quantize.imatrix.entries_count".into(),
            Value::U32(self.entries.len() as u32),
        ));
        if self.chunk_count > 0 {
            m.push((
                "quantize.imatrix.chunks_count".into(),
                Value::U32(self.chunk_count),
            ));
        }
        m
    }
}

fn f32s(file: &GgufFile, name: &str) -> Result<Vec<f32>> {
    let info = file.content().tensor_info(name).expect("listed tensor");
    ensure!(
        info.dtype == GgmlDType::F32,
        "{name} is {}, not F32",
        info.dtype
    );
    Ok(le_f32s(file.tensor_bytes(name)?))
}

fn le_f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

/// Little-endian reads that fail, rather than panic, past the end.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            bail!(
                "the file ends after {} bytes, {n} more were needed at byte {}",
                self.bytes.len(),
                self.at
            );
        };
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn i32(&mut self) -> Result<i32> {
        Ok(i32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }

    /// A non-negative i32 length.
    fn len(&mut self) -> Result<usize> {
        let n = self.i32()?;
        usize::try_from(n).map_err(|_| anyhow::anyhow!("negative length {n}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn legacy(entries: &[(&str, i32, &[f32])], trailer: bool) -> Vec<u8> {
        let mut b = (entries.len() as i32).to_le_bytes().to_vec();
        for (name, ncall, values) in entries {
            b.extend((name.len() as i32).to_le_bytes());
            b.extend(name.as_bytes());
            b.extend(ncall.to_le_bytes());
            b.extend((values.len() as i32).to_le_bytes());
            b.extend(values.iter().flat_map(|v| v.to_le_bytes()));
        }
        if trailer {
            b.extend(7i32.to_le_bytes());
            b.extend(4i32.to_le_bytes());
            b.extend(b"wiki");
        }
        b
    }

    #[test]
    fn legacy_values_are_divided_by_the_call_count() {
        let m = ImportanceMatrix::from_legacy(&legacy(
            &[("a.weight", 4, &[8.0, 2.0]), ("b.weight", 0, &[3.0])],
            true,
        ))
        .unwrap();
        assert_eq!(
            m.for_tensor("a.weight", &[5, 2]).unwrap(),
            Some(&[2.0, 0.5][..])
        );
        assert_eq!(m.for_tensor("b.weight", &[5, 1]).unwrap(), Some(&[3.0][..]));
        assert_eq!(m.for_tensor("c.weight", &[5, 1]).unwrap(), None);
        assert_eq!(
            (m.chunk_count, m.datasets.clone()),
            (7, vec!["wiki".to_string()])
        );
        // A second matrix of two experts needs twice the columns.
        assert!(m.for_tensor("a.weight", &[2, 5, 2]).is_err());
        let m = ImportanceMatrix::from_legacy(&legacy(&[("a", 1, &[1.0])], false)).unwrap();
        assert_eq!((m.chunk_count, m.datasets.len()), (0, 0));
    }

    /// Every truncation and many corruptions of a valid file give a result or an error,
    /// never a panic or a huge allocation.
    #[test]
    fn damaged_legacy_files_never_panic() {
        let good = legacy(
            &[("blk.0.attn_q.weight", 3, &[1.0; 40]), ("x", 1, &[2.0; 3])],
            true,
        );
        for n in 0..good.len() {
            let _ = ImportanceMatrix::from_legacy(&good[..n]);
        }
        let mut s = 0x2545_f491u32;
        for _ in 0..5000 {
            let mut bad = good.clone();
            for _ in 0..3 {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                let at = s as usize % bad.len();
                bad[at] = (s >> 24) as u8;
            }
            let _ = ImportanceMatrix::from_legacy(&bad);
        }
    }
}
