//! Key/value caches for incremental decoding, over `[batch, kv_heads, seq, head_dim]` tensors.
//!
//! Both caches pre-allocate and append with `Tensor::write_slice`, which writes in place once
//! the previous step's views are dropped; nothing re-concatenates the whole history per token.

use hanzo_ml::{DType, Device, Error, Result, Tensor};

/// Sequence dim of `[b, h, t, d]`.
const SEQ: usize = 2;

fn check_kv(k: &Tensor, v: &Tensor) -> Result<(usize, usize, usize, usize)> {
    let kd = k.dims4()?;
    let vd = v.dims4()?;
    if (kd.0, kd.1, kd.2) != (vd.0, vd.1, vd.2) {
        return Err(Error::invalid(
            "KvCache",
            format!("keys {:?} and values {:?} disagree", k.dims(), v.dims()),
        ));
    }
    Ok(kd)
}

fn buffer(like: &Tensor, seq: usize) -> Result<Tensor> {
    let mut dims = like.dims().to_vec();
    dims[SEQ] = seq;
    Tensor::zeros(dims, like.dtype(), &like.device())
}

/// A growing cache: capacity doubles as needed up to an optional hard limit.
pub struct KvCache {
    k: Option<Tensor>,
    v: Option<Tensor>,
    len: usize,
    max_len: Option<usize>,
    initial: usize,
}

impl KvCache {
    /// `initial` positions are allocated on the first append; `max_len` (if any) is the
    /// context limit past which `append` is an error rather than a silent truncation.
    pub fn new(initial: usize, max_len: Option<usize>) -> Self {
        Self {
            k: None,
            v: None,
            len: 0,
            max_len,
            initial: initial.max(1),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.k.as_ref().map_or(0, |k| k.dims()[SEQ])
    }

    pub fn reset(&mut self) {
        self.len = 0;
    }

    /// Forgets everything after the first `len` positions (e.g. to reuse a shared prefix).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Appends `k`, `v` (`[b, h, t, d]`) and returns all cached keys and values so far.
    pub fn append(&mut self, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let (_, _, t, _) = check_kv(k, v)?;
        let need = self.len + t;
        if let Some(max) = self.max_len {
            if need > max {
                return Err(Error::invalid(
                    "KvCache",
                    format!("context full: {} cached + {t} new > limit {max}", self.len),
                ));
            }
        }
        if need > self.capacity() {
            let mut cap = self.capacity().max(self.initial);
            while cap < need {
                cap *= 2;
            }
            if let Some(max) = self.max_len {
                cap = cap.min(max);
            }
            let mut nk = buffer(k, cap)?;
            let mut nv = buffer(v, cap)?;
            if let (Some(ok), Some(ov)) = (&self.k, &self.v) {
                if self.len > 0 {
                    nk.write_slice(&ok.narrow(SEQ, 0, self.len)?, SEQ, 0)?;
                    nv.write_slice(&ov.narrow(SEQ, 0, self.len)?, SEQ, 0)?;
                }
            }
            self.k = Some(nk);
            self.v = Some(nv);
        }
        let (ck, cv) = (
            self.k.as_mut().expect("allocated"),
            self.v.as_mut().expect("allocated"),
        );
        ck.write_slice(&k.contiguous()?, SEQ, self.len)?;
        cv.write_slice(&v.contiguous()?, SEQ, self.len)?;
        self.len = need;
        Ok((ck.narrow(SEQ, 0, need)?, cv.narrow(SEQ, 0, need)?))
    }
}

/// A fixed-size sliding-window cache (a ring buffer of `window` positions): memory never
/// grows, and keys older than the window are overwritten.
pub struct RingKvCache {
    k: Tensor,
    v: Tensor,
    window: usize,
    /// Tokens seen so far (absolute position of the next token).
    seen: usize,
}

/// Keys and values for one attention call with the absolute position of each key.
pub struct WindowKv {
    pub k: Tensor,
    pub v: Tensor,
    pub positions: Vec<usize>,
}

impl RingKvCache {
    pub fn new(
        batch: usize,
        kv_heads: usize,
        head_dim: usize,
        window: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        if window == 0 {
            return Err(Error::invalid("RingKvCache", "window must be > 0"));
        }
        let shape = (batch, kv_heads, window, head_dim);
        Ok(Self {
            k: Tensor::zeros(shape, dtype, device)?,
            v: Tensor::zeros(shape, dtype, device)?,
            window,
            seen: 0,
        })
    }

    pub fn seen(&self) -> usize {
        self.seen
    }

    pub fn window(&self) -> usize {
        self.window
    }

    pub fn reset(&mut self) {
        self.seen = 0;
    }

    /// Slot and absolute position of every valid key, oldest first.
    fn valid(&self) -> Vec<(usize, usize)> {
        let n = self.seen.min(self.window);
        (self.seen - n..self.seen)
            .map(|p| (p % self.window, p))
            .collect()
    }

    /// Appends `t` new tokens. The result holds every key a new query could see: the previous
    /// window plus the new tokens (a query at position `p` may attend to keys in
    /// `(p - window, p]`; the caller masks with [`WindowKv::positions`]).
    pub fn append(&mut self, k: &Tensor, v: &Tensor) -> Result<WindowKv> {
        let (_, _, t, _) = check_kv(k, v)?;
        let (k, v) = (k.contiguous()?, v.contiguous()?);
        if t == 1 {
            // Decode: the slot overwritten holds the key just leaving the window.
            let slot = self.seen % self.window;
            self.k.write_slice(&k, SEQ, slot)?;
            self.v.write_slice(&v, SEQ, slot)?;
            self.seen += 1;
            let valid = self.valid();
            let n = valid.len();
            // Keys in slot order; attention does not care about key order, only the mask.
            let mut positions = vec![0; n];
            for (slot, pos) in valid {
                positions[slot] = pos;
            }
            return Ok(WindowKv {
                k: self.k.narrow(SEQ, 0, n)?,
                v: self.v.narrow(SEQ, 0, n)?,
                positions,
            });
        }
        // Prefill: old window (oldest first) followed by the new tokens.
        let old = self.valid();
        let gather = |buf: &Tensor| -> Result<Tensor> {
            let parts: Vec<Tensor> = old
                .iter()
                .map(|&(s, _)| buf.narrow(SEQ, s, 1))
                .collect::<Result<_>>()?;
            let refs: Vec<&Tensor> = parts.iter().collect();
            Tensor::cat(&refs, SEQ)
        };
        let (all_k, all_v) = if old.is_empty() {
            (k.clone(), v.clone())
        } else {
            (
                Tensor::cat(&[&gather(&self.k)?, &k], SEQ)?,
                Tensor::cat(&[&gather(&self.v)?, &v], SEQ)?,
            )
        };
        let mut positions: Vec<usize> = old.iter().map(|&(_, p)| p).collect();
        positions.extend(self.seen..self.seen + t);
        // Store the last `window` new tokens.
        // Store the last `window` new tokens: at most two runs (before and after the wrap).
        let keep = t.min(self.window);
        let first = t - keep;
        let slot = (self.seen + first) % self.window;
        let run = keep.min(self.window - slot);
        for (from, len, at) in [(first, run, slot), (first + run, keep - run, 0)] {
            if len > 0 {
                self.k
                    .write_slice(&k.narrow(SEQ, from, len)?.contiguous()?, SEQ, at)?;
                self.v
                    .write_slice(&v.narrow(SEQ, from, len)?.contiguous()?, SEQ, at)?;
            }
        }
        self.seen += t;
        Ok(WindowKv {
            k: all_k,
            v: all_v,
            positions,
        })
    }
}
