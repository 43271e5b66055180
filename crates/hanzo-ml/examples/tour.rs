//! A short tour of the tensor API: creation, broadcasting, views, matmul, reductions,
//! neural primitives and autograd.
//!
//! Run: cargo run --release -p hanzo-ml --example tour

use hanzo_ml::{AttentionMask, DType, Device, Result, Tensor};

fn main() -> Result<()> {
    let dev = Device::Cpu;
    let a = Tensor::new([[1f32, 2.], [3., 4.]], &dev)?;
    let b = Tensor::new([[5f32, 6.], [7., 8.]], &dev)?;
    println!("a @ b            = {:?}", a.matmul(&b)?.to_vec2::<f32>()?);
    println!(
        "a + [10, 20]     = {:?}",
        a.add(&Tensor::new([10f32, 20.], &dev)?)?.to_vec2::<f32>()?
    );
    println!("a.t() (a view)   = {:?}", a.t()?.to_vec2::<f32>()?);
    println!(
        "u8 + f32 -> {:?}",
        Tensor::new([1u8], &dev)?
            .add(&Tensor::new([0.5f32], &dev)?)?
            .dtype()
    );
    println!(
        "softmax([1,2,3]) = {:?}",
        Tensor::new([1f32, 2., 3.], &dev)?
            .softmax(0)?
            .to_vec1::<f32>()?
    );
    println!("sum over dim 1   = {:?}", a.sum(1usize)?.to_vec1::<f32>()?);

    hanzo_ml::manual_seed(0);
    let x = Tensor::randn(0.0, 1.0, (1, 4, 8, 16), DType::F32, &dev)?;
    let k = Tensor::randn(0.0, 1.0, (1, 2, 8, 16), DType::F32, &dev)?;
    let attn = Tensor::scaled_dot_product_attention(&x, &k, &k, AttentionMask::Causal, None)?;
    println!("GQA causal attention output shape {:?}", attn.dims());

    // Autograd: d/dw of sum((w x)^2).
    let w = Tensor::new([0.5f64, -1.0, 2.0], &dev)?.variable();
    let xs = Tensor::new([1f64, 2., 3.], &dev)?;
    let loss = w.mul(&xs)?.sqr()?.sum_all()?;
    let grads = loss.backward()?;
    println!(
        "loss = {}, dloss/dw = {:?}",
        loss.to_scalar::<f64>()?,
        grads.get(&w).map(|g| g.to_vec1::<f64>()).transpose()?
    );
    Ok(())
}
