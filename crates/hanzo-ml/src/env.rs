//! The environment variables hanzo-ml reads, all in one place. Each is read once per process.
//!
//! | variable | effect |
//! |---|---|
//! | `HANZO_ISA` | caps the instruction set every CPU kernel uses (`scalar`, `neon`, `simd128`, `avx2`, `avxvnni`, `avx512`): for comparisons and debugging; a set this CPU lacks is ignored with a warning |
//! | `HANZO_INTERLEAVE=0` | keeps the 32-element types' weights (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4) in their stored layout instead of repacking them eight rows at a time for decode |
//! | `HANZO_HUGE_PAGES=0` | leaves a mapped model file on the page cache's pages instead of moving it onto 2 MiB pages |

use std::sync::OnceLock;

fn read(name: &str, cell: &'static OnceLock<Option<String>>) -> Option<&'static str> {
    cell.get_or_init(|| std::env::var(name).ok()).as_deref()
}

/// `HANZO_ISA`, if set.
pub(crate) fn isa_cap() -> Option<&'static str> {
    static V: OnceLock<Option<String>> = OnceLock::new();
    read("HANZO_ISA", &V)
}

/// False when `HANZO_INTERLEAVE=0`.
pub(crate) fn interleave() -> bool {
    static V: OnceLock<Option<String>> = OnceLock::new();
    read("HANZO_INTERLEAVE", &V) != Some("0")
}

/// False when `HANZO_HUGE_PAGES=0`.
pub(crate) fn huge_pages() -> bool {
    static V: OnceLock<Option<String>> = OnceLock::new();
    read("HANZO_HUGE_PAGES", &V) != Some("0")
}
