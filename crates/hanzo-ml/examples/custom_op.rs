//! Adding a kernel without touching the core: a `CustomOp1` computing softplus,
//! `log(1 + exp(x))`, on the CPU with a backward rule, then checking the gradient.
//!
//! Run: cargo run -p hanzo-ml --example custom_op

use hanzo_ml::{CpuStorage, CustomOp1, DType, Device, Error, Layout, Result, Shape, Tensor};

struct Softplus;

impl CustomOp1 for Softplus {
    fn name(&self) -> &'static str {
        "softplus"
    }

    fn cpu_fwd(&self, s: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        // Read the (possibly strided) input in row-major order.
        let f = |x: f64| if x > 20.0 { x } else { x.exp().ln_1p() };
        let out = match s {
            CpuStorage::F32(v) => CpuStorage::from_vec(
                layout
                    .offsets()
                    .map(|o| f(v[o] as f64) as f32)
                    .collect::<Vec<_>>(),
            ),
            CpuStorage::F64(v) => {
                CpuStorage::from_vec(layout.offsets().map(|o| f(v[o])).collect::<Vec<_>>())
            }
            s => {
                return Err(Error::UnsupportedDType {
                    op: "softplus",
                    dtype: s.dtype(),
                })
            }
        };
        Ok((out, layout.shape().clone()))
    }

    /// d softplus / dx = sigmoid(x).
    fn bwd(&self, x: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Tensor> {
        grad.mul(&x.sigmoid()?)
    }
}

fn main() -> Result<()> {
    let x = Tensor::new([-2f64, -0.5, 0.0, 1.5, 30.0], &Device::Cpu)?.variable();
    let y = x.apply_op1(Softplus)?;
    println!(
        "softplus({:?}) = {:?}",
        x.to_vec1::<f64>()?,
        y.to_vec1::<f64>()?
    );
    let grads = y.sum_all()?.backward()?;
    let g = grads.get(&x).expect("x is a variable").to_vec1::<f64>()?;
    println!("gradient = {g:?}");
    let want = x.sigmoid()?.to_vec1::<f64>()?;
    assert!(g.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-12));
    let f32_out = Tensor::new([0f32, 1.0], &Device::Cpu)?.apply_op1(Softplus)?;
    assert_eq!(f32_out.dtype(), DType::F32);
    Ok(())
}
