//! f32 row kernels with runtime SIMD dispatch. `scalar` is always compiled and is the
//! reference the vectorised paths are tested against; `Kernels::detect()` picks the best set
//! for this CPU once per process.

pub mod scalar;

use std::sync::OnceLock;

/// One table of row kernels; each field is a plain fn so dispatch costs one indirect call.
#[derive(Clone, Copy)]
pub struct Kernels {
    pub name: &'static str,
    pub sum: fn(&[f32]) -> f32,
    pub max: fn(&[f32]) -> f32,
    pub dot: fn(&[f32], &[f32]) -> f32,
    pub add: fn(&[f32], &[f32], &mut [f32]),
    pub sub: fn(&[f32], &[f32], &mut [f32]),
    pub mul: fn(&[f32], &[f32], &mut [f32]),
    pub div: fn(&[f32], &[f32], &mut [f32]),
    pub exp: fn(&[f32], &mut [f32]),
    pub silu: fn(&[f32], &mut [f32]),
    pub softmax: fn(&[f32], &mut [f32]),
    pub log_softmax: fn(&[f32], &mut [f32]),
    pub rms_norm: fn(&[f32], &[f32], f32, &mut [f32]),
    pub layer_norm: fn(&[f32], &[f32], Option<&[f32]>, f32, &mut [f32]),
}

impl Kernels {
    pub const SCALAR: Kernels = Kernels {
        name: "scalar",
        sum: scalar::sum,
        max: scalar::max,
        dot: scalar::dot,
        add: scalar::add,
        sub: scalar::sub,
        mul: scalar::mul,
        div: scalar::div,
        exp: scalar::exp,
        silu: scalar::silu,
        softmax: scalar::softmax,
        log_softmax: scalar::log_softmax,
        rms_norm: scalar::rms_norm,
        layer_norm: scalar::layer_norm,
    };

    /// Every kernel set this CPU can run, best last (scalar first). Tests compare them all.
    pub fn available() -> Vec<Kernels> {
        vec![Self::SCALAR]
    }

    fn detect() -> Kernels {
        let mut all = Self::available();
        if std::env::var_os("HANZO_ML_SCALAR").is_some() {
            return Self::SCALAR;
        }
        all.pop().unwrap_or(Self::SCALAR)
    }
}

/// The kernels chosen for this process.
pub fn kernels() -> &'static Kernels {
    static K: OnceLock<Kernels> = OnceLock::new();
    K.get_or_init(Kernels::detect)
}

pub fn sum_f32(v: &[f32]) -> f32 {
    (kernels().sum)(v)
}
