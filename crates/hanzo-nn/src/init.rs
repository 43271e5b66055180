//! Weight initialisers. Fan-in / fan-out follow PyTorch: for a weight `[out, in, k...]`,
//! fan_in = in * prod(k), fan_out = out * prod(k).

use hanzo_ml::{DType, Device, Result, Shape, Tensor};

/// The nonlinearity that follows a layer, for the Kaiming gain.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Gain {
    Linear,
    Relu,
    /// PyTorch's default for `nn.Linear`/`nn.Conv*`: leaky ReLU with slope sqrt(5), which
    /// makes Kaiming-uniform bound equal 1/sqrt(fan_in).
    LeakyRelu(f64),
    Tanh,
}

impl Gain {
    pub fn value(self) -> f64 {
        match self {
            Gain::Linear => 1.0,
            Gain::Relu => 2f64.sqrt(),
            Gain::LeakyRelu(a) => (2.0 / (1.0 + a * a)).sqrt(),
            Gain::Tanh => 5.0 / 3.0,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    Const(f64),
    Uniform {
        lo: f64,
        hi: f64,
    },
    Normal {
        mean: f64,
        std: f64,
    },
    /// He et al.: uniform with bound gain * sqrt(3 / fan_in).
    KaimingUniform(Gain),
    /// He et al.: normal with std gain / sqrt(fan_in).
    KaimingNormal(Gain),
    /// Glorot & Bengio: uniform with bound gain * sqrt(6 / (fan_in + fan_out)).
    XavierUniform(f64),
    /// Glorot & Bengio: normal with std gain * sqrt(2 / (fan_in + fan_out)).
    XavierNormal(f64),
}

impl Init {
    /// PyTorch's `nn.Linear` / `nn.Conv*` weight default.
    pub const DEFAULT_WEIGHT: Init = Init::KaimingUniform(Gain::LeakyRelu(2.236_067_977_499_79));

    pub fn tensor(self, shape: &Shape, dtype: DType, device: &Device) -> Result<Tensor> {
        let (fan_in, fan_out) = fans(shape);
        match self {
            Init::Const(v) => Tensor::full(v, shape.clone(), dtype, device),
            Init::Uniform { lo, hi } => Tensor::rand(lo, hi, shape.clone(), dtype, device),
            Init::Normal { mean, std } => Tensor::randn(mean, std, shape.clone(), dtype, device),
            Init::KaimingUniform(g) => {
                let b = g.value() * (3.0 / fan_in as f64).sqrt();
                Tensor::rand(-b, b, shape.clone(), dtype, device)
            }
            Init::KaimingNormal(g) => {
                let std = g.value() / (fan_in as f64).sqrt();
                Tensor::randn(0.0, std, shape.clone(), dtype, device)
            }
            Init::XavierUniform(gain) => {
                let b = gain * (6.0 / (fan_in + fan_out) as f64).sqrt();
                Tensor::rand(-b, b, shape.clone(), dtype, device)
            }
            Init::XavierNormal(gain) => {
                let std = gain * (2.0 / (fan_in + fan_out) as f64).sqrt();
                Tensor::randn(0.0, std, shape.clone(), dtype, device)
            }
        }
    }
}

/// (fan_in, fan_out) of a weight shape; never zero.
pub fn fans(shape: &Shape) -> (usize, usize) {
    let d = shape.dims();
    let (fi, fo) = match d.len() {
        0 => (1, 1),
        1 => (d[0], d[0]),
        _ => {
            let field: usize = d[2..].iter().product();
            (d[1] * field, d[0] * field)
        }
    };
    (fi.max(1), fo.max(1))
}
