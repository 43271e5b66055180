//! Prefill panel kernels: the data they take and the choice among them (the x86 kernels are
//! in `panel_x86`). A panel is a few weight rows unpacked to bytes (see
//! `GgmlBlock::unpacking`) and interleaved so that one vector holds 4 consecutive levels of
//! each row; `quantized::cpu::gemm` unpacks the panels and runs the kernel over them.

use crate::quantized::format::BlockQ8_0;

/// One activation row: its Q8_0 blocks, and per weight scale group the block scale `d` and
/// `d · Σ q` over the group's elements.
// Only the x86 kernels read panels so far (no NEON panel kernel yet).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
#[derive(Clone, Copy)]
pub struct PanelRow<'a> {
    pub q: &'a [BlockQ8_0],
    pub d: &'a [f32],
    pub dsum: &'a [f32],
}

/// `rows` weight rows, interleaved: levels `4t..4t + 4` of row `r` at `u[(t * rows + r) * 4..]`,
/// group `g`'s scale and min of row `r` at `[g * rows + r]`.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub struct Panel<'a> {
    pub u: &'a [u8],
    pub scale: &'a [f32],
    pub min: &'a [f32],
}

/// `out[c * rows + r] = (panel row r) · x[c]` for every activation row `c`.
pub type PanelFn = fn(&Panel, &[PanelRow], &mut [f32]);

/// The panel kernel for weights of this scale group and largest level, with the rows per
/// panel it takes, where this CPU has one.
pub fn pick_panel(group: usize, max_level: u8) -> Option<(usize, PanelFn)> {
    #[cfg(target_arch = "x86_64")]
    {
        super::panel_x86::pick(group, max_level)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (group, max_level);
        None
    }
}
