//! A small team of spinning threads for latency-bound parallel loops (decode matvecs).
//!
//! A decode step is a chain of short parallel loops (tens of microseconds each) separated by
//! short serial stretches. Rayon parks idle workers after a brief spin, so every loop paid a
//! wake-up (a futex round trip, tens of microseconds on a VM) and the caller, when outside
//! the pool, blocked and woke again. The team's workers instead spin on a generation counter
//! for [`SPIN`] after each loop, so the next loop starts within a cache-line transfer; they
//! park only once the caller has been quiet that long.
//!
//! One loop runs at a time. A caller that finds the team busy (another sequence, or a loop
//! started from inside a team task) gets `false` back and does the work some other way.

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, TryLockError};
use std::time::{Duration, Instant};

/// How long an idle worker spins before parking.
const SPIN: Duration = Duration::from_millis(2);

/// The task body of the running loop, its lifetime erased (see `run`).
type Body = *const (dyn Fn(usize) + Sync);

struct Shared {
    /// Bumped (under `park`) to publish a loop.
    generation: AtomicUsize,
    /// Next unclaimed task index of the current loop.
    next: AtomicUsize,
    tasks: AtomicUsize,
    /// Workers still inside the current loop.
    busy: AtomicUsize,
    panicked: AtomicBool,
    body: UnsafeCell<Option<Body>>,
    /// Parked workers wait here for the next generation.
    park: Mutex<()>,
    wake: Condvar,
}

// SAFETY: `body` is written only by the one caller holding `Team::caller`, before it publishes
// the generation (Release) and after every worker has left the loop (`busy` == 0, Acquire);
// workers read it only between those two points. All other fields are atomics or locks.
unsafe impl Sync for Shared {}
// SAFETY: as above; the raw pointer is only dereferenced under that protocol.
unsafe impl Send for Shared {}

pub struct Team {
    shared: Arc<Shared>,
    /// Held by the caller of the running loop.
    caller: Mutex<()>,
    workers: usize,
}

thread_local! {
    static IN_TEAM: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Set while the process runs its loops on fewer threads than the team has (a device too
/// hot, `set_enabled`): every `run` then declines, so `par_for` falls back to rayon, whose
/// current pool the caller chose.
static DISABLED: AtomicBool = AtomicBool::new(false);

/// Whether team loops run (`true`, the default) or every `Team::run` declines and the
/// parallel loops go to the rayon pool the caller runs in (`ThreadPool::install` of a
/// smaller pool: how the edge runtime lowers its thread count when the device is hot). The
/// team's workers park once idle for [`SPIN`].
pub fn set_enabled(on: bool) {
    DISABLED.store(!on, Ordering::Relaxed);
}

/// The process-wide team: as many threads in all (the caller included) as rayon's global
/// pool, so `-t N` governs both.
pub fn global() -> &'static Team {
    static TEAM: OnceLock<Team> = OnceLock::new();
    TEAM.get_or_init(|| Team::new(rayon::current_num_threads().saturating_sub(1)))
}

impl Team {
    /// A team of `workers` threads besides the caller.
    pub fn new(workers: usize) -> Self {
        let shared = Arc::new(Shared {
            generation: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            tasks: AtomicUsize::new(0),
            busy: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            body: UnsafeCell::new(None),
            park: Mutex::new(()),
            wake: Condvar::new(),
        });
        let mut started = 0;
        for i in 0..workers {
            let s = shared.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("hanzo-team-{i}"))
                .spawn(move || worker(&s));
            if spawned.is_err() {
                break; // fewer helpers is still correct
            }
            started += 1;
        }
        Self {
            shared,
            caller: Mutex::new(()),
            workers: started,
        }
    }

    /// Threads that run a loop, the caller included.
    pub fn threads(&self) -> usize {
        self.workers + 1
    }

    /// Runs `body(i)` for every `i` in `0..tasks`, spread over the team and the calling
    /// thread, and returns `true` once all have finished. Returns `false` without running
    /// anything if the team is busy or this is a team thread. A panic in `body` is re-raised
    /// here after every thread has left the loop.
    pub fn run(&self, tasks: usize, body: &(dyn Fn(usize) + Sync)) -> bool {
        if IN_TEAM.with(|t| t.get()) || DISABLED.load(Ordering::Relaxed) {
            return false;
        }
        let _guard = match self.caller.try_lock() {
            Ok(g) => g,
            // A loop that panicked left nothing half-done behind the lock.
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return false,
        };
        let s = &*self.shared;
        if self.workers == 0 || tasks <= 1 {
            (0..tasks).for_each(body);
            return true;
        }
        // SAFETY: only the `caller` lock holder writes `body`, and no worker reads it now:
        // every worker left the previous loop (`busy` reached 0) before that call returned.
        // The lifetime is erased, but this call does not return before `busy` is 0 again,
        // so no worker uses the pointer after `body` goes out of scope.
        unsafe {
            let erased: Body = std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), Body>(
                body as *const (dyn Fn(usize) + Sync),
            );
            *s.body.get() = Some(erased);
        }
        s.tasks.store(tasks, Ordering::Relaxed);
        s.next.store(0, Ordering::Relaxed);
        s.panicked.store(false, Ordering::Relaxed);
        s.busy.store(self.workers, Ordering::Relaxed);
        {
            // Publishing under the lock means a worker about to park either sees the new
            // generation or is already waiting when `notify_all` runs.
            let _p = s.park.lock().unwrap_or_else(|e| e.into_inner());
            s.generation.fetch_add(1, Ordering::Release);
        }
        s.wake.notify_all();
        let mine = catch_unwind(AssertUnwindSafe(|| claim(s, body)));
        while s.busy.load(Ordering::Acquire) != 0 {
            std::hint::spin_loop();
        }
        if let Err(p) = mine {
            resume_unwind(p);
        }
        if s.panicked.load(Ordering::Relaxed) {
            panic!("a team task panicked");
        }
        true
    }
}

/// Takes task indices until none are left.
fn claim(s: &Shared, body: &(dyn Fn(usize) + Sync)) {
    let tasks = s.tasks.load(Ordering::Relaxed);
    loop {
        let i = s.next.fetch_add(1, Ordering::Relaxed);
        if i >= tasks {
            break;
        }
        body(i);
    }
}

fn worker(s: &Shared) {
    IN_TEAM.with(|t| t.set(true));
    // Generation 0 is the one before any loop; a worker that starts late must still take the
    // loops published before it ran.
    let mut seen = 0;
    loop {
        seen = wait_for_next(s, seen);
        // SAFETY: the generation was published (Acquire above) after `body` was written, and
        // the caller keeps it alive until this worker decrements `busy` below.
        let body = unsafe { (*s.body.get()).expect("published with the generation") };
        // SAFETY: see above; the pointee outlives this use.
        let body = unsafe { &*body };
        if catch_unwind(AssertUnwindSafe(|| claim(s, body))).is_err() {
            s.panicked.store(true, Ordering::Relaxed);
        }
        s.busy.fetch_sub(1, Ordering::Release);
    }
}

/// Spins, then parks, until the generation moves past `seen`; returns the new one.
fn wait_for_next(s: &Shared, seen: usize) -> usize {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        let g = s.generation.load(Ordering::Acquire);
        if g != seen {
            return g;
        }
        std::hint::spin_loop();
        spins += 1;
        if spins.is_multiple_of(256) && start.elapsed() > SPIN {
            break;
        }
    }
    let mut guard = s.park.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let g = s.generation.load(Ordering::Acquire);
        if g != seen {
            return g;
        }
        guard = s.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn every_task_runs_once() {
        let team = Team::new(3);
        for tasks in [0, 1, 2, 7, 1000] {
            let hits: Vec<AtomicU64> = (0..tasks).map(|_| AtomicU64::new(0)).collect();
            assert!(team.run(tasks, &|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            }));
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        }
    }

    #[test]
    fn parked_workers_wake_up() {
        let team = Team::new(2);
        let sum = AtomicU64::new(0);
        std::thread::sleep(SPIN * 3); // let the workers park
        assert!(team.run(100, &|i| {
            sum.fetch_add(i as u64, Ordering::Relaxed);
        }));
        assert_eq!(sum.load(Ordering::Relaxed), 4950);
    }

    #[test]
    fn nested_and_concurrent_calls_are_refused_not_deadlocked() {
        let team = Team::new(2);
        let refused = AtomicU64::new(0);
        assert!(team.run(8, &|_| {
            if !team.run(4, &|_| {}) {
                refused.fetch_add(1, Ordering::Relaxed);
            }
        }));
        assert_eq!(refused.load(Ordering::Relaxed), 8);
    }

    #[test]
    fn a_panicking_task_reaches_the_caller_and_the_team_survives() {
        let team = Team::new(2);
        let r = catch_unwind(AssertUnwindSafe(|| {
            team.run(64, &|i| assert!(i != 40, "task 40"));
        }));
        assert!(r.is_err());
        let n = AtomicU64::new(0);
        assert!(team.run(64, &|_| {
            n.fetch_add(1, Ordering::Relaxed);
        }));
        assert_eq!(n.load(Ordering::Relaxed), 64);
    }
}
