//! The device's thermal state, where the platform reports it (Linux: `/sys/class/thermal`).
//!
//! The state is 0 (nominal), 1 (fair), 2 (serious) or 3 (critical), the scale mobile
//! platforms use, read from the hottest thermal zone against its own trip points where it
//! has them (`passive` throttling: serious; `hot` or `critical`: critical) and against fixed
//! temperatures where it has none (70, 85 and 95 °C).

use std::path::{Path, PathBuf};
use web_time::{Duration, Instant};

/// The thermal state now, or `None` where the platform reports no thermal zones.
pub fn state() -> Option<u8> {
    state_in(Path::new("/sys/class/thermal"))
}

/// [`state`] over the zones under `root` (a `/sys/class/thermal`-like directory).
pub fn state_in(root: &Path) -> Option<u8> {
    let zones = std::fs::read_dir(root).ok()?;
    zones
        .flatten()
        .filter(|z| z.file_name().to_string_lossy().starts_with("thermal_zone"))
        .filter_map(|z| zone_state(&z.path()))
        .max()
}

fn read_milli(path: &Path) -> Option<i64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn zone_state(zone: &Path) -> Option<u8> {
    let temp = read_milli(&zone.join("temp"))?;
    let mut passive = None;
    let mut critical = None;
    for i in 0..16 {
        let Ok(kind) = std::fs::read_to_string(zone.join(format!("trip_point_{i}_type"))) else {
            break;
        };
        let Some(t) = read_milli(&zone.join(format!("trip_point_{i}_temp"))) else {
            continue;
        };
        // Unset trip points read as 0 or negative on some boards.
        if t <= 0 {
            continue;
        }
        match kind.trim() {
            "passive" => passive = Some(passive.map_or(t, |p: i64| p.min(t))),
            "hot" | "critical" => critical = Some(critical.map_or(t, |c: i64| c.min(t))),
            _ => {}
        }
    }
    let serious = passive.unwrap_or(85_000);
    let critical = critical.unwrap_or(95_000).max(serious);
    let fair = serious - 15_000;
    Some(match temp {
        t if t >= critical => 3,
        t if t >= serious => 2,
        t if t >= fair => 1,
        _ => 0,
    })
}

/// How often a generation reads the thermal state again.
const RECHECK: Duration = Duration::from_secs(1);

/// Fewer threads while the device is hot: above `limit`, forward passes run in a rayon pool
/// of `cool_threads / 2` (at least one) with the decode team switched off
/// (`hanzo_ml::cpu::team::set_enabled`), and back on all threads once it has cooled.
pub(crate) struct Throttle {
    zones: PathBuf,
    limit: Option<u8>,
    cool_threads: usize,
    hot_pool: Option<rayon::ThreadPool>,
    state: Option<u8>,
    checked: Option<Instant>,
}

impl Throttle {
    pub fn new(zones: PathBuf, limit: Option<u8>) -> Self {
        Self {
            zones,
            limit,
            cool_threads: rayon::current_num_threads(),
            hot_pool: None,
            state: None,
            checked: None,
        }
    }

    /// Threads forward passes run on now.
    pub fn threads(&self) -> usize {
        match self.is_hot() {
            true => self.hot_threads(),
            false => self.cool_threads,
        }
    }

    /// The thermal state as last read (`None` where the platform reports none).
    pub fn state(&self) -> Option<u8> {
        self.state
    }

    fn hot_threads(&self) -> usize {
        (self.cool_threads / 2).max(1)
    }

    fn is_hot(&self) -> bool {
        matches!((self.state, self.limit), (Some(s), Some(l)) if s > l)
    }

    /// Reads the thermal state again if a second has passed, and says so in the log when
    /// the thread count changes.
    pub fn update(&mut self) {
        if self.checked.is_some_and(|t| t.elapsed() < RECHECK) {
            return;
        }
        self.checked = Some(Instant::now());
        let was_hot = self.is_hot();
        self.state = state_in(&self.zones);
        let hot = self.is_hot();
        if hot && !was_hot {
            tracing::warn!(
                "thermal state {} is above {}: generating on {} threads of {}",
                self.state.unwrap_or(0),
                self.limit.unwrap_or(0),
                self.hot_threads(),
                self.cool_threads
            );
        } else if was_hot && !hot {
            tracing::info!(
                "thermal state {}: back to {} threads",
                self.state.unwrap_or(0),
                self.cool_threads
            );
        }
    }

    /// Runs `f` on as many threads as the thermal state allows.
    pub fn run<R: Send>(&mut self, f: impl FnOnce() -> R + Send) -> R {
        if !self.is_hot() || self.hot_threads() >= self.cool_threads {
            return f();
        }
        if self.hot_pool.is_none() {
            self.hot_pool = rayon::ThreadPoolBuilder::new()
                .num_threads(self.hot_threads())
                .thread_name(|i| format!("hanzo-edge-cool-{i}"))
                .build()
                .ok();
        }
        let Some(pool) = &self.hot_pool else {
            return f();
        };
        hanzo_ml::cpu::team::set_enabled(false);
        let out = pool.install(f);
        hanzo_ml::cpu::team::set_enabled(true);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::state_in;
    use std::fs;

    fn zone(root: &std::path::Path, n: usize, temp: i64, trips: &[(&str, i64)]) {
        let z = root.join(format!("thermal_zone{n}"));
        fs::create_dir_all(&z).unwrap();
        fs::write(z.join("temp"), format!("{temp}\n")).unwrap();
        for (i, (kind, t)) in trips.iter().enumerate() {
            fs::write(z.join(format!("trip_point_{i}_type")), format!("{kind}\n")).unwrap();
            fs::write(z.join(format!("trip_point_{i}_temp")), format!("{t}\n")).unwrap();
        }
    }

    #[test]
    fn the_hottest_zone_against_its_trip_points() {
        let root = std::env::temp_dir().join(format!("hanzo-thermal-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root).unwrap();
        assert_eq!(state_in(&root), None);
        zone(&root, 0, 45_000, &[]);
        assert_eq!(state_in(&root), Some(0));
        // Fixed thresholds without trip points: 72 °C is fair.
        zone(&root, 1, 72_000, &[]);
        assert_eq!(state_in(&root), Some(1));
        // A board that throttles at 60 °C: 61 °C is serious, 80 °C at its critical point.
        zone(
            &root,
            2,
            61_000,
            &[("passive", 60_000), ("critical", 80_000)],
        );
        assert_eq!(state_in(&root), Some(2));
        zone(
            &root,
            3,
            80_000,
            &[("passive", 60_000), ("critical", 80_000)],
        );
        assert_eq!(state_in(&root), Some(3));
        fs::remove_dir_all(&root).unwrap();
        assert_eq!(state_in(&root), None);
    }
}
