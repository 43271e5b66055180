//! Layout = shape + strides + offset into storage. Every view (transpose, narrow, broadcast,
//! permute) is a new Layout over the same storage; nothing here copies data.

use crate::{Error, Result, Shape};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    shape: Shape,
    stride: Vec<usize>,
    start_offset: usize,
}

impl Layout {
    pub fn contiguous(shape: impl Into<Shape>) -> Self {
        Self::contiguous_with_offset(shape, 0)
    }
    pub fn contiguous_with_offset(shape: impl Into<Shape>, start_offset: usize) -> Self {
        let shape = shape.into();
        let stride = shape.stride_contiguous();
        Self {
            shape,
            stride,
            start_offset,
        }
    }
    pub fn new(shape: Shape, stride: Vec<usize>, start_offset: usize) -> Self {
        Self {
            shape,
            stride,
            start_offset,
        }
    }
    pub fn shape(&self) -> &Shape {
        &self.shape
    }
    pub fn dims(&self) -> &[usize] {
        self.shape.dims()
    }
    pub fn stride(&self) -> &[usize] {
        &self.stride
    }
    pub fn start_offset(&self) -> usize {
        self.start_offset
    }
    pub fn is_contiguous(&self) -> bool {
        self.shape.is_contiguous(&self.stride)
    }
    /// `Some((start, end))` when the elements are one contiguous run of storage.
    pub fn contiguous_offsets(&self) -> Option<(usize, usize)> {
        self.is_contiguous().then(|| {
            (
                self.start_offset,
                self.start_offset + self.shape.elem_count(),
            )
        })
    }

    pub fn narrow(&self, dim: usize, start: usize, len: usize) -> Result<Self> {
        let size = self.dims()[dim];
        if start.checked_add(len).is_none_or(|e| e > size) {
            return Err(Error::NarrowOutOfRange {
                op: "narrow",
                dim,
                start,
                len,
                size,
            });
        }
        let mut dims = self.dims().to_vec();
        dims[dim] = len;
        Ok(Self {
            shape: dims.into(),
            stride: self.stride.clone(),
            start_offset: self.start_offset + self.stride[dim] * start,
        })
    }

    pub fn transpose(&self, d1: usize, d2: usize) -> Self {
        let mut dims = self.dims().to_vec();
        let mut stride = self.stride.clone();
        dims.swap(d1, d2);
        stride.swap(d1, d2);
        Self {
            shape: dims.into(),
            stride,
            start_offset: self.start_offset,
        }
    }

    /// `perm` must be a permutation of 0..rank (checked by the caller).
    pub fn permute(&self, perm: &[usize]) -> Self {
        let dims = perm.iter().map(|&i| self.dims()[i]).collect::<Vec<_>>();
        let stride = perm.iter().map(|&i| self.stride[i]).collect();
        Self {
            shape: dims.into(),
            stride,
            start_offset: self.start_offset,
        }
    }

    /// View as `shape` (NumPy broadcasting: leading dims added, size-1 dims stretched with
    /// stride 0).
    pub fn broadcast_as(&self, shape: &Shape) -> Result<Self> {
        let (src, dst) = (self.dims(), shape.dims());
        if dst.len() < src.len() {
            return Err(Error::BroadcastIncompatible {
                op: "broadcast_as",
                lhs: self.shape.clone(),
                rhs: shape.clone(),
            });
        }
        let lead = dst.len() - src.len();
        let mut stride = vec![0; dst.len()];
        for (i, &d) in dst.iter().enumerate().skip(lead) {
            let s = src[i - lead];
            stride[i] = if s == d {
                self.stride[i - lead]
            } else if s == 1 {
                0
            } else {
                return Err(Error::BroadcastIncompatible {
                    op: "broadcast_as",
                    lhs: self.shape.clone(),
                    rhs: shape.clone(),
                });
            };
        }
        Ok(Self {
            shape: shape.clone(),
            stride,
            start_offset: self.start_offset,
        })
    }

    /// Reinterpret a contiguous layout with a new shape of the same element count.
    pub fn reshaped(&self, shape: Shape) -> Option<Self> {
        self.is_contiguous()
            .then(|| Self::contiguous_with_offset(shape, self.start_offset))
    }

    /// The storage index one past the largest element this layout reaches (0 when empty).
    pub fn required_storage_len(&self) -> usize {
        if self.shape.elem_count() == 0 {
            return 0;
        }
        self.start_offset
            + self
                .dims()
                .iter()
                .zip(&self.stride)
                .map(|(&d, &s)| (d - 1) * s)
                .sum::<usize>()
            + 1
    }

    /// The storage offsets in row-major order, grouped as contiguous blocks.
    pub fn blocks(&self) -> Blocks {
        // Fold trailing dims that are laid out contiguously into one block.
        let dims = self.dims();
        let mut block_len = 1;
        let mut split = dims.len();
        for i in (0..dims.len()).rev() {
            if dims[i] == 1 {
                split = i;
                continue;
            }
            if self.stride[i] != block_len {
                break;
            }
            block_len *= dims[i];
            split = i;
        }
        if split == 0 || self.shape.elem_count() == 0 {
            return Blocks::Single {
                start: self.start_offset,
                len: self.shape.elem_count(),
            };
        }
        Blocks::Multiple {
            block_len,
            starts: StridedIndex::new(&dims[..split], &self.stride[..split], self.start_offset),
        }
    }

    /// Every element's storage offset in row-major order.
    pub fn offsets(&self) -> StridedIndex {
        StridedIndex::new(self.dims(), &self.stride, self.start_offset)
    }
}

pub enum Blocks {
    Single {
        start: usize,
        len: usize,
    },
    Multiple {
        block_len: usize,
        starts: StridedIndex,
    },
}

/// Iterator over storage offsets of a strided view, row-major.
pub struct StridedIndex {
    next: Option<usize>,
    index: Vec<usize>,
    dims: Vec<usize>,
    stride: Vec<usize>,
}

impl StridedIndex {
    pub fn new(dims: &[usize], stride: &[usize], start: usize) -> Self {
        let empty = dims.contains(&0);
        Self {
            next: if empty { None } else { Some(start) },
            index: vec![0; dims.len()],
            dims: dims.to_vec(),
            stride: stride.to_vec(),
        }
    }
}

impl Iterator for StridedIndex {
    type Item = usize;
    #[inline]
    fn next(&mut self) -> Option<usize> {
        let cur = self.next?;
        let mut next = cur;
        let mut done = true;
        for i in (0..self.dims.len()).rev() {
            if self.index[i] + 1 < self.dims[i] {
                self.index[i] += 1;
                next += self.stride[i];
                done = false;
                break;
            }
            next -= self.index[i] * self.stride[i];
            self.index[i] = 0;
        }
        self.next = if done { None } else { Some(next) };
        Some(cur)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn strided_offsets_of_transpose() {
        let l = Layout::contiguous((2, 3)).transpose(0, 1);
        assert_eq!(l.offsets().collect::<Vec<_>>(), vec![0, 3, 1, 4, 2, 5]);
        assert!(!l.is_contiguous());
        match l.blocks() {
            Blocks::Multiple { block_len, starts } => {
                assert_eq!(block_len, 1);
                assert_eq!(starts.count(), 6);
            }
            _ => panic!("expected multiple blocks"),
        }
    }
    #[test]
    fn narrow_blocks() {
        let l = Layout::contiguous((4, 5)).narrow(1, 1, 3).unwrap();
        match l.blocks() {
            Blocks::Multiple { block_len, starts } => {
                assert_eq!(block_len, 3);
                assert_eq!(starts.collect::<Vec<_>>(), vec![1, 6, 11, 16]);
            }
            _ => panic!(),
        }
        assert!(Layout::contiguous((4, 5)).narrow(1, 3, 3).is_err());
    }
}
