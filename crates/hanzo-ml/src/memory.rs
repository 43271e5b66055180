//! The process's own memory, as the kernel counts it: what a memory budget is checked
//! against.

/// Resident memory of this process, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessMemory {
    /// Resident now (`VmRSS`: anonymous, file-backed and shared pages).
    pub resident: u64,
    /// The most ever resident (`VmHWM`).
    pub peak: u64,
    /// Under a user-mode emulator (qemu-user), the emulator's own resident memory now, which
    /// `resident` and `peak` leave out; 0 on a real CPU.
    pub emulator: u64,
}

/// This process's resident and peak memory; `None` where `/proc` has no such figures
/// (off Linux).
///
/// Under qemu-user `/proc/self/status` is the emulator's, so it counts the emulator's code
/// cache and heap beside the program's pages. There the program's own pages are told apart
/// by address (qemu answers `/proc/self/maps` with the guest's mappings only, and passes
/// `/proc/self/smaps` through from the host), and the rest is taken off both figures: the
/// rest as it is now, which is also its most, since the code cache only grows.
pub fn process_memory() -> Option<ProcessMemory> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = line[name.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kb * 1024)
    };
    let (resident, peak) = (field("VmRSS:")?, field("VmHWM:")?);
    let emulated = status
        .lines()
        .any(|l| l.starts_with("Name:") && l[5..].trim().starts_with("qemu-"));
    let emulator = if emulated {
        emulator_resident(resident).unwrap_or(0)
    } else {
        0
    };
    Some(ProcessMemory {
        resident: resident - emulator,
        peak: peak.saturating_sub(emulator),
        emulator,
    })
}

/// The emulator's share of `resident`: what `/proc/self/smaps` counts outside the guest's
/// mappings. `None` when no guest mapping is found in smaps (an emulator that offsets guest
/// addresses from the host's).
fn emulator_resident(resident: u64) -> Option<u64> {
    let guest = address_ranges(&std::fs::read_to_string("/proc/self/maps").ok()?);
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut guest_resident = 0u64;
    let mut range = None;
    for line in smaps.lines() {
        if let Some(r) = address_ranges(line).first() {
            range = Some(*r);
        } else if let (Some(rest), Some((start, end))) = (line.strip_prefix("Rss:"), range) {
            let kb: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
            // The part of this host mapping the guest has, pro rata (they coincide but
            // where qemu maps a guest region in pieces).
            let shared: u64 = guest
                .iter()
                .map(|&(s, e)| e.min(end).saturating_sub(s.max(start)))
                .sum();
            guest_resident += kb * 1024 * shared.min(end - start) / (end - start).max(1);
        }
    }
    (guest_resident > 0).then(|| resident.saturating_sub(guest_resident))
}

/// The `start-end` address ranges that open the lines of a maps listing.
fn address_ranges(listing: &str) -> Vec<(u64, u64)> {
    listing
        .lines()
        .filter_map(|l| {
            let (start, end) = l.split_whitespace().next()?.split_once('-')?;
            let start = u64::from_str_radix(start, 16).ok()?;
            let end = u64::from_str_radix(end, 16).ok()?;
            (end > start).then_some((start, end))
        })
        .collect()
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #[test]
    fn peak_is_at_least_what_is_resident_and_grows_with_touched_memory() {
        let before = super::process_memory().unwrap();
        assert!(before.peak >= before.resident && before.resident > 0);
        let big = vec![1u8; 64 << 20];
        let after = super::process_memory().unwrap();
        assert!(
            after.peak >= before.resident + (60 << 20),
            "{before:?} {after:?}"
        );
        drop(big);
    }

    #[test]
    fn address_ranges_are_read_from_maps_lines_only() {
        let maps = "5500000000-5500001000 r-xp 00000000 fe:00 1 /tmp/a\nRss:  4 kB\n\
                    7f00-7f10 rw-p 00000000 00:00 0\n";
        assert_eq!(
            super::address_ranges(maps),
            [(0x5500000000, 0x5500001000), (0x7f00, 0x7f10)]
        );
    }
}
