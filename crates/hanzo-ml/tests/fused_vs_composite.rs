//! The fused CPU kernels against the composite implementations a backend without them
//! falls back to, for every float dtype and for strided inputs.

use hanzo_ml::{DType, Device, Result, RopeKind, Tensor};

const CPU: Device = Device::Cpu;

fn assert_close(name: &str, a: &Tensor, b: &Tensor, tol: f64) -> Result<()> {
    assert_eq!(a.dims(), b.dims(), "{name}");
    let a = a.to_dtype(DType::F64)?.flatten_all()?.to_vec1::<f64>()?;
    let b = b.to_dtype(DType::F64)?.flatten_all()?.to_vec1::<f64>()?;
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "{name}[{i}]: fused {x} vs composite {y}"
        );
    }
    Ok(())
}

fn tol(dt: DType) -> f64 {
    match dt {
        DType::F64 => 1e-12,
        DType::F32 => 1e-5,
        DType::F16 => 4e-3,
        _ => 3e-2,
    }
}

#[test]
fn fused_kernels_match_composites() -> Result<()> {
    hanzo_ml::manual_seed(7);
    for dt in [DType::F64, DType::F32, DType::F16, DType::BF16] {
        let x = Tensor::randn(0.0, 2.0, (3, 5, 67), DType::F32, &CPU)?.to_dtype(dt)?;
        let strided = x.transpose(0, 1)?; // non-contiguous rows
        let w = Tensor::randn(1.0, 0.5, 67, DType::F32, &CPU)?.to_dtype(dt)?;
        let b = Tensor::randn(0.0, 0.5, 67, DType::F32, &CPU)?.to_dtype(dt)?;
        let t = tol(dt);
        for (name, input) in [("contiguous", &x), ("strided", &strided)] {
            for dim in [0usize, 1, 2] {
                assert_close(
                    &format!("softmax {dt:?} {name} dim {dim}"),
                    &input.softmax(dim)?,
                    &input.softmax_composite(dim, false)?,
                    t,
                )?;
                assert_close(
                    &format!("log_softmax {dt:?} {name} dim {dim}"),
                    &input.log_softmax(dim)?,
                    &input.softmax_composite(dim, true)?,
                    t,
                )?;
            }
            // Composites compute in the input dtype; compare both against f64 for halves.
            let x64 = input.to_dtype(DType::F64)?;
            let (w64, b64) = (w.to_dtype(DType::F64)?, b.to_dtype(DType::F64)?);
            assert_close(
                &format!("layer_norm {dt:?} {name}"),
                &input.layer_norm(&w, Some(&b), 1e-5)?,
                &x64.layer_norm_composite(&w64, Some(&b64), 1e-5)?,
                t,
            )?;
            assert_close(
                &format!("rms_norm {dt:?} {name}"),
                &input.rms_norm(&w, 1e-6)?,
                &x64.rms_norm_composite(&w64, 1e-6)?,
                t,
            )?;
        }
        let q = Tensor::randn(0.0, 1.0, (2, 3, 7, 16), DType::F32, &CPU)?.to_dtype(dt)?;
        let angle = Tensor::rand(-3.0, 3.0, (7, 8), DType::F64, &CPU)?;
        let (cos, sin) = (angle.cos()?.to_dtype(dt)?, angle.sin()?.to_dtype(dt)?);
        for kind in [RopeKind::Interleaved, RopeKind::HalfSplit] {
            let fused = q.rotary_emb(&cos, &sin, kind)?;
            let composite = q.to_dtype(DType::F64)?.rotary_emb_composite(
                &cos.to_dtype(DType::F64)?,
                &sin.to_dtype(DType::F64)?,
                kind,
            )?;
            assert_close(&format!("rope {kind:?} {dt:?}"), &fused, &composite, t)?;
        }
    }
    Ok(())
}

/// A rotation preserves each pair's norm, and rotating by -angle undoes it.
#[test]
fn rope_is_a_rotation() -> Result<()> {
    let q = Tensor::randn(0.0, 1.0, (1, 2, 5, 8), DType::F64, &CPU)?;
    let angle = Tensor::rand(-3.0, 3.0, (5, 4), DType::F64, &CPU)?;
    let (cos, sin) = (angle.cos()?, angle.sin()?);
    for kind in [RopeKind::Interleaved, RopeKind::HalfSplit] {
        let r = q.rotary_emb(&cos, &sin, kind)?;
        let back = r.rotary_emb(&cos, &sin.neg()?, kind)?;
        assert_close("rope inverse", &back, &q, 1e-12)?;
        assert_close(
            "rope norm",
            &r.sqr()?.sum(3usize)?,
            &q.sqr()?.sum(3usize)?,
            1e-12,
        )?;
    }
    Ok(())
}
