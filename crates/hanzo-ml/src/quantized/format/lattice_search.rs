//! The search behind ggml's IQ1/IQ2/IQ3 quantizers. A run of weights (4 for IQ3, 8 for IQ1
//! and IQ2) must land on a point of a fixed lattice of level indices `l` (magnitude `2l + 1`
//! for IQ2/IQ3). A group's scale is searched over a few candidates; each run is rounded to the
//! nearest levels, and where those are not a lattice point, the best of that combination's
//! precomputed nearest points is taken. The scale with the best least-squares fit wins.

// Runs, levels and flags are indexed by the same run number.
#![allow(clippy::needless_range_loop)]

/// A lattice as the searches use it: each point's level indices and, for every combination of
/// levels below `levels`, either its point or, off the lattice, its nearest points (all those
/// at the `nearest` smallest distances).
pub(super) struct Lattice {
    run: usize,
    bits: usize,
    levels: i32,
    points: Box<[i8]>,
    /// Point index, or `-(offset + 1)` into `neighbours` (a count, then that many points).
    map: Vec<i32>,
    neighbours: Vec<u16>,
}

impl Lattice {
    /// `points`: `run` level indices per point, each below `levels` and keyed by `bits` bits.
    pub fn new(points: Box<[i8]>, run: usize, bits: usize, levels: i32, nearest: usize) -> Self {
        let mut lat = Self {
            run,
            bits,
            levels,
            points,
            map: vec![-1; 1 << (bits * run)],
            neighbours: Vec::new(),
        };
        for p in 0..lat.len() {
            let k = lat.key(lat.point_levels(p));
            lat.map[k] = p as i32;
        }
        let digit = |u: usize, k: usize| ((u >> (bits * k)) & ((1 << bits) - 1)) as i32;
        let mut dist = Vec::with_capacity(lat.len());
        for u in 0..lat.map.len() {
            if lat.map[u] >= 0 || (0..run).any(|k| digit(u, k) >= levels) {
                continue;
            }
            dist.clear();
            dist.extend(lat.points.chunks_exact(run).map(|l| {
                (0..run)
                    .map(|k| (2 * (l[k] as i32 - digit(u, k))).pow(2))
                    .sum::<i32>()
            }));
            lat.map[u] = -(lat.neighbours.len() as i32 + 1);
            let at = lat.neighbours.len();
            lat.neighbours.push(0);
            // The points at the `nearest` smallest distances, nearest first, in point order
            // within a distance (ggml sorts by distance, then index).
            let mut floor = -1;
            for _ in 0..nearest {
                let Some(d2) = dist.iter().copied().filter(|&d| d > floor).min() else {
                    break;
                };
                let ties = (0..dist.len()).filter(|&j| dist[j] == d2);
                lat.neighbours.extend(ties.map(|j| j as u16));
                floor = d2;
            }
            lat.neighbours[at] = (lat.neighbours.len() - at - 1) as u16;
        }
        lat
    }

    pub fn len(&self) -> usize {
        self.points.len() / self.run
    }

    pub fn key(&self, l: &[i8]) -> usize {
        (0..self.run)
            .map(|i| (l[i] as usize) << (self.bits * i))
            .sum()
    }

    pub fn point_levels(&self, p: usize) -> &[i8] {
        &self.points[p * self.run..(p + 1) * self.run]
    }

    /// The keys of the first `n` points (the tests compare them with ggml's point lists).
    #[cfg(test)]
    pub fn first_keys(&self, n: usize) -> Vec<usize> {
        (0..n).map(|p| self.key(self.point_levels(p))).collect()
    }

    /// The lattice point of levels `l`, if they are one.
    pub fn point(&self, l: &[i8]) -> Option<usize> {
        usize::try_from(self.map[self.key(l)]).ok()
    }

    /// The nearest points of levels `l`, which are off the lattice.
    pub fn neighbours(&self, l: &[i8]) -> &[u16] {
        let at = (-self.map[self.key(l)] - 1) as usize;
        &self.neighbours[at + 1..at + 1 + self.neighbours[at] as usize]
    }

    /// Levels `l` (off the lattice) moved to the nearby point with the least weighted error
    /// `Σ w·(scale·(2l+1) - x)²`, the first on ties.
    pub fn best_neighbour(&self, l: &mut [i8], x: &[f32], w: &[f32], scale: f32) -> usize {
        let (mut best_d2, mut best) = (f32::MAX, 0usize);
        for &p in self.neighbours(l) {
            let pl = self.point_levels(p as usize);
            let mut d2 = 0f32;
            for i in 0..self.run {
                let diff = scale * (2 * pl[i] as i32 + 1) as f32 - x[i];
                d2 += w[i] * diff * diff;
            }
            if d2 < best_d2 {
                (best_d2, best) = (d2, p as usize);
            }
        }
        l[..self.run].copy_from_slice(self.point_levels(best));
        best
    }

    /// Rounds `x` at inverse scale `id` to the nearest levels; if that is off the lattice,
    /// moves to the best neighbour under `scale`. Returns whether it was on the lattice.
    fn place(&self, l: &mut [i8], x: &[f32], waux: &[f32], id: f32, scale: f32) -> bool {
        for (l, &x) in l[..self.run].iter_mut().zip(x) {
            *l = super::search::nearest_int(0.5 * (id * x - 1.0)).clamp(0, self.levels - 1) as i8;
        }
        if self.point(l).is_some() {
            return true;
        }
        self.best_neighbour(l, x, waux, scale);
        false
    }
}

/// Which runs the last pass places again, against the winning scale.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Replace {
    /// Only those that were off the lattice (IQ2_XS, IQ2_S, IQ3_XXS).
    OffLattice,
    /// All of them, if any was off the lattice (IQ3_S).
    AllIfAnyOff,
    /// All of them, always (IQ2_XXS).
    All,
}

/// One group's candidate scales: `id = (base + step·is) / max_ref` for `is` in
/// `-steps..=steps`, and the scale kept if none fits.
pub(super) struct Candidates {
    pub base: f32,
    pub step: f32,
    pub steps: i32,
    pub max_ref: f32,
    pub initial: f32,
}

fn fit_sums(w: &[f32], x: &[f32], l: &[i8]) -> (f32, f32) {
    let (mut sumqx, mut sumq2) = (0f32, 0f32);
    for i in 0..x.len() {
        let q = (2 * l[i] as i32 + 1) as f32;
        sumqx += w[i] * x[i] * q;
        sumq2 += w[i] * q * q;
    }
    (sumqx, sumq2)
}

/// The scale and lattice levels (in `l`, `x.len()` of them) of one group of magnitudes `x`
/// under error weights `w`.
#[inline(never)]
pub(super) fn fit_group(
    lat: &Lattice,
    x: &[f32],
    w: &[f32],
    c: &Candidates,
    replace: Replace,
    l: &mut [i8],
) -> f32 {
    let (n, run) = (x.len(), lat.run);
    let runs = n / run;
    let waux: Vec<f32> = w.iter().map(|w| w.sqrt()).collect();
    let mut best = 0f32;
    let mut scale = c.initial;
    let mut on_grid = [replace != Replace::AllIfAnyOff; 8];
    let mut laux = [0i8; 32];
    for is in -c.steps..=c.steps {
        let id = (c.base + is as f32 * c.step) / c.max_ref;
        let this_scale = 1.0 / id;
        let mut on_aux = [true; 8];
        for k in 0..runs {
            let r = run * k..run * (k + 1);
            on_aux[k] = lat.place(
                &mut laux[r.clone()],
                &x[r.clone()],
                &waux[r],
                id,
                this_scale,
            );
        }
        let (sumqx, sumq2) = fit_sums(w, x, &laux[..n]);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            l[..n].copy_from_slice(&laux[..n]);
            on_grid = on_aux;
        }
    }
    let again = match replace {
        Replace::All => true,
        _ => on_grid[..runs].contains(&false),
    };
    if again && scale > 0.0 {
        let id = 1.0 / scale;
        for k in 0..runs {
            if replace == Replace::OffLattice && on_grid[k] {
                continue;
            }
            let r = run * k..run * (k + 1);
            lat.place(&mut l[r.clone()], &x[r.clone()], &waux[r], id, scale);
        }
        let (sumqx, sumq2) = fit_sums(w, x, &l[..n]);
        if sumq2 > 0.0 {
            scale = sumqx / sumq2;
        }
    }
    scale
}

/// Magnitudes and sign bits of 8 weights whose sign count must be even (the 8th sign is
/// implied by the other 7): an odd count flips the element that costs least, `w·x²`.
pub(super) fn even_signs(x: &[f32], w: &[f32], xval: &mut [f32]) -> u8 {
    let (mut s, mut nflip) = (0u8, 0);
    for i in 0..8 {
        xval[i] = if x[i] >= 0.0 {
            x[i]
        } else {
            nflip += 1;
            s |= 1 << i;
            -x[i]
        };
    }
    if nflip % 2 == 1 {
        let cost = |i: usize| w[i] * x[i] * x[i];
        let imin = (1..8).fold(0, |m, i| if cost(i) < cost(m) { i } else { m });
        xval[imin] = -xval[imin];
        s ^= 1 << imin;
    }
    s & 127
}

/// The magnitudes of a group of 32 and the 7-bit sign index of each run of 8 (`even_signs`).
pub(super) fn even_signs32(x: &[f32], w: &[f32; 32]) -> ([f32; 32], [u32; 4]) {
    let mut xval = [0f32; 32];
    let signs = std::array::from_fn(|k| {
        let r = 8 * k..8 * k + 8;
        even_signs(&x[r.clone()], &w[r.clone()], &mut xval[r]) as u32
    });
    (xval, signs)
}

/// The largest of `x` (ggml's `MAX` fold, first wins on ties).
pub(super) fn max_of(x: &[f32]) -> f32 {
    x[1..].iter().fold(x[0], |m, &v| if m > v { m } else { v })
}

/// The 4-bit odd multiplier `2m + 1` of each group scale against `d = max_scale / 31`.
pub(super) fn multipliers<const N: usize>(scales: &[f32; N], d: f32) -> [u32; N] {
    let id = 1.0 / d;
    scales.map(|s| super::search::nearest_int(0.5 * (id * s - 1.0)).clamp(0, 15) as u32)
}
