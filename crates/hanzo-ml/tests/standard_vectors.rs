//! The test vectors the issue names, plus basic invariants of views and errors.

use hanzo_ml::{AttentionMask, DType, Device, Error, Tensor};

const CPU: Device = Device::Cpu;

#[test]
fn matmul_2x2() -> hanzo_ml::Result<()> {
    let a = Tensor::new([[1f32, 2.], [3., 4.]], &CPU)?;
    let b = Tensor::new([[5f32, 6.], [7., 8.]], &CPU)?;
    assert_eq!(
        a.matmul(&b)?.to_vec2::<f32>()?,
        vec![vec![19., 22.], vec![43., 50.]]
    );
    for dt in [DType::F64, DType::F16, DType::BF16] {
        let c = a
            .to_dtype(dt)?
            .matmul(&b.to_dtype(dt)?)?
            .to_dtype(DType::F32)?;
        assert_eq!(
            c.to_vec2::<f32>()?,
            vec![vec![19., 22.], vec![43., 50.]],
            "{dt:?}"
        );
    }
    Ok(())
}

#[test]
fn softmax_1_2_3() -> hanzo_ml::Result<()> {
    let x = Tensor::new([1f32, 2., 3.], &CPU)?;
    let want = [0.0900f32, 0.2447, 0.6652];
    for s in [x.softmax(0)?, x.softmax_composite(0, false)?] {
        for (g, w) in s.to_vec1::<f32>()?.iter().zip(want) {
            assert!((g - w).abs() < 1e-3, "{g} vs {w}");
        }
    }
    // Stable for large inputs.
    let big = Tensor::new([1000f32, 1001., 1002.], &CPU)?
        .softmax(0)?
        .to_vec1::<f32>()?;
    assert!((big[2] - 0.6652).abs() < 1e-3);
    Ok(())
}

#[test]
fn rope_identity_rotation_is_exact() -> hanzo_ml::Result<()> {
    let x = Tensor::randn(0.0, 1.0, (2, 3, 5, 8), DType::F32, &CPU)?;
    let cos = Tensor::ones((5, 4), DType::F32, &CPU)?;
    let sin = Tensor::zeros((5, 4), DType::F32, &CPU)?;
    assert_eq!(
        x.rope(&cos, &sin)?.to_vec_flat::<f32>()?,
        x.to_vec_flat::<f32>()?
    );
    assert_eq!(
        x.rope_i(&cos, &sin)?.to_vec_flat::<f32>()?,
        x.to_vec_flat::<f32>()?
    );
    Ok(())
}

#[test]
fn cpu_round_trip_is_exact() -> hanzo_ml::Result<()> {
    let x = Tensor::randn(0.0, 1.0, (4, 7), DType::F32, &CPU)?;
    let y = x.to_device(&CPU)?;
    assert_eq!(x.to_vec2::<f32>()?, y.to_vec2::<f32>()?);
    assert!(matches!(
        Device::new_cuda(0),
        Err(Error::DeviceUnavailable(_))
    ));
    Ok(())
}

#[test]
fn views_share_storage() -> hanzo_ml::Result<()> {
    let x = Tensor::arange(0f32, 12., &CPU)?.reshape((3, 4))?;
    let t = x.t()?;
    assert!(t.same_storage(&x));
    assert!(!t.is_contiguous());
    assert_eq!(t.to_vec2::<f32>()?[1], vec![1., 5., 9.]);
    let n = x.narrow(1, 1, 2)?;
    assert!(n.same_storage(&x));
    assert_eq!(
        n.to_vec2::<f32>()?,
        vec![vec![1., 2.], vec![5., 6.], vec![9., 10.]]
    );
    let b = Tensor::new([1f32, 2., 3., 4.], &CPU)?.broadcast_as((3, 4))?;
    assert_eq!(b.layout().stride(), &[0, 1]);
    Ok(())
}

#[test]
fn precise_errors() -> hanzo_ml::Result<()> {
    let a = Tensor::zeros((2, 3), DType::F32, &CPU)?;
    let b = Tensor::zeros((4, 5), DType::F32, &CPU)?;
    assert!(matches!(
        a.add(&b),
        Err(Error::BroadcastIncompatible { op: "add", .. })
    ));
    assert!(matches!(
        a.matmul(&b),
        Err(Error::ShapeMismatch { op: "matmul", .. })
    ));
    assert!(matches!(
        a.narrow(1, 2, 2),
        Err(Error::NarrowOutOfRange { .. })
    ));
    assert!(matches!(a.sum(5usize), Err(Error::DimOutOfRange { .. })));
    let ids = Tensor::new([0u32, 7], &CPU)?;
    assert!(matches!(
        a.index_select(&ids, 1),
        Err(Error::IndexOutOfRange {
            index: 7,
            size: 3,
            ..
        })
    ));
    let u = Tensor::zeros((2, 3), DType::U8, &CPU)?;
    assert!(matches!(
        u.exp(),
        Err(Error::UnsupportedDType { op: "exp", .. })
    ));
    assert!(Tensor::from_vec(vec![1f32; 5], (2, 3), &CPU).is_err());
    let q = Tensor::zeros((1, 3, 4, 8), DType::F32, &CPU)?;
    let k = Tensor::zeros((1, 2, 4, 8), DType::F32, &CPU)?;
    assert!(Tensor::scaled_dot_product_attention(&q, &k, &k, AttentionMask::None, None).is_err());
    Ok(())
}

#[test]
fn numpy_type_promotion() -> hanzo_ml::Result<()> {
    let u = Tensor::new([1u8, 2], &CPU)?;
    let f = Tensor::new([0.5f32, 0.25], &CPU)?;
    let s = u.add(&f)?;
    assert_eq!(s.dtype(), DType::F32);
    assert_eq!(s.to_vec1::<f32>()?, vec![1.5, 2.25]);
    let h = f.to_dtype(DType::F16)?;
    assert_eq!(h.add(&f)?.dtype(), DType::F32);
    assert_eq!(h.add(&f.to_dtype(DType::BF16)?)?.dtype(), DType::F32);
    Ok(())
}

#[test]
fn seeded_rng_repeats() -> hanzo_ml::Result<()> {
    hanzo_ml::manual_seed(42);
    let a = Tensor::randn(0.0, 1.0, 16, DType::F32, &CPU)?.to_vec1::<f32>()?;
    hanzo_ml::manual_seed(42);
    let b = Tensor::randn(0.0, 1.0, 16, DType::F32, &CPU)?.to_vec1::<f32>()?;
    assert_eq!(a, b);
    Ok(())
}

#[test]
fn bad_arguments_are_errors_not_panics() -> hanzo_ml::Result<()> {
    let x = Tensor::zeros((2, 3), DType::F32, &CPU)?;
    assert!(x.sum_to_shape(&(4, 3).into()).is_err());
    assert!(x.sum_to_shape(&(1, 2, 3).into()).is_err());
    assert!(Tensor::rand(0.0, f64::INFINITY, 3, DType::F32, &CPU).is_err());
    assert!(Tensor::rand(1.0, 0.0, 3, DType::F32, &CPU).is_err());
    assert!(Tensor::randn(0.0, -1.0, 3, DType::F32, &CPU).is_err());
    assert!(Tensor::arange_step(0f32, 1.0, 0.0, &CPU).is_err());
    let s = Tensor::full(1.0, (), DType::F32, &CPU)?;
    assert!(s.softmax(0).is_err());
    assert!(s.cumsum(0).is_err());
    assert!(s.layer_norm(&s, None, 1e-5).is_err());
    assert!(s.t().is_err());
    assert!(x.permute(&[0, 0]).is_err());
    assert!(x.unsqueeze(3).is_err());
    assert!(x.chunk(0, 1).is_err());
    assert!(x.split(&[1, 1], 1).is_err());
    assert!(x.topk(4, 1).is_err());
    assert!(x
        .gather(&Tensor::zeros((2, 3, 1), DType::U32, &CPU)?, 1)
        .is_err());
    assert!(x
        .index_select(&Tensor::zeros(2, DType::F32, &CPU)?, 1)
        .is_err());
    assert!(x.where_cond(&x, &x).is_err(), "float condition");
    assert!(
        Tensor::zeros(0, DType::F32, &CPU)?.max(0).is_err(),
        "max of nothing"
    );
    assert_eq!(
        Tensor::zeros(0, DType::F32, &CPU)?
            .sum(0)?
            .to_scalar::<f32>()?,
        0.0
    );
    assert!(Tensor::new(vec![vec![1f32, 2.], vec![3.]], &CPU).is_err());
    Ok(())
}

/// The matrix-vector fast path (m == 1 or n == 1) agrees with the general gemm path.
#[test]
fn matvec_paths_agree_with_gemm() -> hanzo_ml::Result<()> {
    let w = Tensor::randn(0.0, 1.0, (37, 300), DType::F32, &CPU)?;
    let x = Tensor::randn(0.0, 1.0, (300, 1), DType::F32, &CPU)?;
    let reference = |a: &Tensor, b: &Tensor| -> hanzo_ml::Result<Vec<f64>> {
        a.to_dtype(DType::F64)?
            .matmul(&b.to_dtype(DType::F64)?)?
            .flatten_all()?
            .to_vec1::<f64>()
    };
    let close = |got: Vec<f32>, want: Vec<f64>| {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert!((*g as f64 - w).abs() < 1e-4 * (1.0 + w.abs()), "{g} vs {w}");
        }
    };
    close(w.matmul(&x)?.flatten_all()?.to_vec1()?, reference(&w, &x)?);
    // Decode-style x @ W^T with W row-major: m == 1, columns of W^T contiguous.
    let xr = x.t()?;
    close(
        xr.matmul(&w.t()?)?.flatten_all()?.to_vec1()?,
        reference(&xr, &w.t()?)?,
    );
    // Non-contiguous inner dim falls back to gemm.
    let wt = Tensor::randn(0.0, 1.0, (300, 37), DType::F32, &CPU)?.t()?;
    close(
        wt.matmul(&x)?.flatten_all()?.to_vec1()?,
        reference(&wt, &x)?,
    );
    Ok(())
}

/// Tiled copies of transposed views (batched, odd sizes, narrowed) equal element-wise reads.
#[test]
fn transposed_copies_are_exact() -> hanzo_ml::Result<()> {
    for dims in [(1usize, 33usize, 70usize), (3, 64, 64), (2, 100, 37)] {
        let x = Tensor::randn(0.0, 1.0, dims, DType::F32, &CPU)?;
        let t = x.transpose(1, 2)?;
        let got = t.contiguous()?.to_vec3::<f32>()?;
        let src = x.to_vec3::<f32>()?;
        for b in 0..dims.0 {
            for i in 0..dims.2 {
                for j in 0..dims.1 {
                    assert_eq!(got[b][i][j], src[b][j][i]);
                }
            }
        }
        // A narrowed, transposed view (offset and gaps) converted to another dtype.
        let n = x.narrow(2, 3, dims.2 - 5)?.transpose(1, 2)?;
        let got = n.to_dtype(DType::F64)?.to_vec3::<f64>()?;
        for b in 0..dims.0 {
            for i in 0..dims.2 - 5 {
                for j in 0..dims.1 {
                    assert_eq!(got[b][i][j], src[b][j][i + 3] as f64);
                }
            }
        }
    }
    Ok(())
}

/// A hand-computed convolution, and parameter errors.
#[test]
fn conv2d_by_hand() -> hanzo_ml::Result<()> {
    // [[1,2,3],[4,5,6],[7,8,9]] * [[1,0],[0,-1]] (valid): x[i][j] - x[i+1][j+1] = -4 everywhere.
    let x = Tensor::arange(1f32, 10., &CPU)?.reshape((1, 1, 3, 3))?;
    let k = Tensor::new([[1f32, 0.], [0., -1.]], &CPU)?.reshape((1, 1, 2, 2))?;
    assert_eq!(
        x.conv2d(&k, 0, 1, 1, 1)?.flatten_all()?.to_vec1::<f32>()?,
        vec![-4.; 4]
    );
    // Padding 1, stride 2: windows at padded (0,0), (0,2), (2,0), (2,2); the last one is
    // x[1][1] - x[2][2].
    let y = x.conv2d(&k, 1, 2, 1, 1)?;
    assert_eq!(y.to_vec_flat::<f32>()?, vec![-1., -3., -7., 5. - 9.]);
    // conv_transpose of a single 1 reproduces the kernel.
    let one = Tensor::ones((1, 1, 1, 1), DType::F32, &CPU)?;
    assert_eq!(
        one.conv_transpose2d(&k, 0, 0, 1, 1, 1)?
            .to_vec_flat::<f32>()?,
        vec![1., 0., 0., -1.]
    );
    assert!(x.conv2d(&k, 0, 0, 1, 1).is_err(), "stride 0");
    assert!(
        x.conv2d(&k, 0, 1, 1, 2).is_err(),
        "channels not divisible by groups"
    );
    assert!(
        x.conv2d(&Tensor::ones((1, 1, 4, 4), DType::F32, &CPU)?, 0, 1, 1, 1)
            .is_err(),
        "kernel too big"
    );
    assert!(x.max_pool2d((4, 4), (1, 1)).is_err());
    assert!(
        x.conv2d(&k.flatten_all()?, 0, 1, 1, 1).is_err(),
        "kernel rank"
    );
    Ok(())
}

#[test]
fn with_contiguous_sees_elements_in_row_major_order() -> hanzo_ml::Result<()> {
    let a = Tensor::new([[1f32, 2., 3.], [4., 5., 6.]], &CPU)?;
    // Contiguous, a contiguous narrow (offset view) and a transpose (strided, copied).
    assert_eq!(
        a.with_contiguous(|v: &[f32]| v.to_vec())?,
        [1., 2., 3., 4., 5., 6.]
    );
    assert_eq!(
        a.narrow(0, 1, 1)?.with_contiguous(|v: &[f32]| v.to_vec())?,
        [4., 5., 6.]
    );
    assert_eq!(
        a.t()?.with_contiguous(|v: &[f32]| v.to_vec())?,
        [1., 4., 2., 5., 3., 6.]
    );
    assert!(matches!(
        a.with_contiguous(|v: &[f64]| v.len()),
        Err(Error::DTypeMismatch { .. })
    ));
    Ok(())
}
