//! The process's own memory, as the kernel counts it: what a memory budget is checked
//! against.

/// Resident memory of this process, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessMemory {
    /// Resident now (`VmRSS`: anonymous, file-backed and shared pages).
    pub resident: u64,
    /// The most ever resident (`VmHWM`).
    pub peak: u64,
}

/// This process's resident and peak memory; `None` where `/proc` has no such figures
/// (off Linux).
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
    Some(ProcessMemory {
        resident: field("VmRSS:")?,
        peak: field("VmHWM:")?,
    })
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
}
