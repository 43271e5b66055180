//! A typed CPU buffer: an owned Vec, or a zero-copy view into a shared `Blob` (a memory map or
//! bytes in memory; used by safetensors loading when the data is aligned for `T`).

use super::Blob;
use std::ops::Deref;
use std::sync::Arc;

#[derive(Clone)]
pub struct Buf<T: bytemuck::Pod>(Repr<T>);

#[derive(Clone)]
enum Repr<T> {
    Owned(Vec<T>),
    Mapped {
        map: Arc<Blob>,
        byte_offset: usize,
        len: usize,
    },
}

impl<T: bytemuck::Pod> Buf<T> {
    pub fn owned(v: Vec<T>) -> Self {
        Buf(Repr::Owned(v))
    }

    /// A view of `len` elements of `map` from `byte_offset`, or `None` when that range is out
    /// of bounds or not aligned for `T` (the caller then copies).
    pub fn mapped(map: Arc<Blob>, byte_offset: usize, len: usize) -> Option<Self> {
        let bytes = len.checked_mul(std::mem::size_of::<T>())?;
        let end = byte_offset.checked_add(bytes)?;
        let slice = map.get(byte_offset..end)?;
        bytemuck::try_cast_slice::<u8, T>(slice).ok()?;
        Some(Buf(Repr::Mapped {
            map,
            byte_offset,
            len,
        }))
    }

    pub fn is_mapped(&self) -> bool {
        matches!(self.0, Repr::Mapped { .. })
    }

    /// Mutable access; a mapped buffer is copied into an owned one first.
    pub fn make_mut(&mut self) -> &mut Vec<T> {
        if let Repr::Mapped { .. } = self.0 {
            self.0 = Repr::Owned(self.deref().to_vec());
        }
        match &mut self.0 {
            Repr::Owned(v) => v,
            Repr::Mapped { .. } => unreachable!("converted to owned above"),
        }
    }

    pub fn into_vec(self) -> Vec<T> {
        match self.0 {
            Repr::Owned(v) => v,
            Repr::Mapped { .. } => self.deref().to_vec(),
        }
    }
}

impl<T: bytemuck::Pod> Deref for Buf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match &self.0 {
            Repr::Owned(v) => v,
            // Range and alignment were checked in `mapped`.
            Repr::Mapped {
                map,
                byte_offset,
                len,
            } => bytemuck::cast_slice(
                &map[*byte_offset..*byte_offset + len * std::mem::size_of::<T>()],
            ),
        }
    }
}
