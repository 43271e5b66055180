//! Every backward rule against central finite differences in f64.
//!
//! For an op `f` with inputs `x_k`, the scalar loss is `sum(f(x) * w)` with fixed random
//! weights `w` (so every output element matters). The analytic gradient from `backward()`
//! must match `(L(x + e) - L(x - e)) / 2e` element by element.

#![allow(clippy::cloned_ref_to_slice_refs)] // `&[x.clone()]` reads better than `from_ref` here

use hanzo_ml::{AttentionMask, DType, Device, Result, RopeKind, Tensor};

const CPU: Device = Device::Cpu;
const EPS: f64 = 1e-6;

fn randn(shape: &[usize]) -> Tensor {
    Tensor::randn(0.0, 1.0, shape.to_vec(), DType::F64, &CPU).unwrap()
}

/// Values in [lo, hi], kept away from kinks.
fn uniform(shape: &[usize], lo: f64, hi: f64) -> Tensor {
    Tensor::rand(lo, hi, shape.to_vec(), DType::F64, &CPU).unwrap()
}

fn check(name: &str, inputs: &[Tensor], f: impl Fn(&[Tensor]) -> Result<Tensor>) {
    let vars: Vec<Tensor> = inputs.iter().map(|t| t.variable()).collect();
    let y = f(&vars).unwrap_or_else(|e| panic!("{name}: forward failed: {e}"));
    let w = randn(y.dims());
    let loss_of = |xs: &[Tensor]| -> f64 {
        f(xs)
            .unwrap()
            .mul(&w)
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f64>()
            .unwrap()
    };
    let grads = y
        .mul(&w)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap_or_else(|e| panic!("{name}: backward failed: {e}"));
    for (k, x) in inputs.iter().enumerate() {
        let analytic = match grads.get(&vars[k]) {
            Some(g) => g.to_vec_flat::<f64>().unwrap(),
            None => vec![0.0; x.elem_count()],
        };
        let base = x.to_vec_flat::<f64>().unwrap();
        for j in 0..base.len() {
            let at = |d: f64| {
                let mut v = base.clone();
                v[j] += d;
                let mut xs = inputs.to_vec();
                xs[k] = Tensor::from_vec(v, x.dims().to_vec(), &CPU).unwrap();
                loss_of(&xs)
            };
            let numeric = (at(EPS) - at(-EPS)) / (2.0 * EPS);
            let tol = 1e-6 + 1e-5 * numeric.abs();
            assert!(
                (analytic[j] - numeric).abs() <= tol,
                "{name}: input {k} element {j}: analytic {} vs numeric {numeric}",
                analytic[j]
            );
        }
    }
}

#[test]
fn unary_ops() {
    let x = randn(&[3, 4]);
    let pos = uniform(&[3, 4], 0.5, 2.0);
    // Away from the kink at 0.
    let away = randn(&[3, 4])
        .sign()
        .unwrap()
        .mul(&uniform(&[3, 4], 0.2, 1.5))
        .unwrap();
    check("exp", &[x.clone()], |i| i[0].exp());
    check("log", &[pos.clone()], |i| i[0].log());
    check("sqrt", &[pos.clone()], |i| i[0].sqrt());
    check("recip", &[pos.clone()], |i| i[0].recip());
    check("tanh", &[x.clone()], |i| i[0].tanh());
    check("sin", &[x.clone()], |i| i[0].sin());
    check("cos", &[x.clone()], |i| i[0].cos());
    check("sigmoid", &[x.clone()], |i| i[0].sigmoid());
    check("silu", &[x.clone()], |i| i[0].silu());
    check("gelu_tanh", &[x.clone()], |i| i[0].gelu());
    check("gelu_erf", &[x.clone()], |i| i[0].gelu_erf());
    check("neg", &[x.clone()], |i| i[0].neg());
    check("sqr", &[x.clone()], |i| i[0].sqr());
    check("abs", &[away.clone()], |i| i[0].abs());
    check("relu", &[away.clone()], |i| i[0].relu());
    check("affine", &[x.clone()], |i| i[0].affine(-1.5, 0.25));
    check("powf", &[pos.clone()], |i| i[0].powf(2.7));
    check("clamp", &[away.clone()], |i| i[0].clamp(-0.7, 0.9));
    // Piecewise-constant ops have zero gradient almost everywhere.
    let off_grid = uniform(&[3, 4], 0.1, 0.4);
    check("floor", &[off_grid.clone()], |i| i[0].floor());
    check("ceil", &[off_grid.clone()], |i| i[0].ceil());
    check("round", &[off_grid.clone()], |i| i[0].round());
    check("sign", &[away.clone()], |i| i[0].sign());
}

#[test]
fn binary_ops_with_broadcasting() {
    let a = randn(&[2, 3, 4]);
    let b = randn(&[3, 1]);
    let pos_a = uniform(&[2, 3, 4], 0.5, 2.0);
    let pos_b = uniform(&[4], 0.5, 2.0);
    check("add", &[a.clone(), b.clone()], |i| i[0].add(&i[1]));
    check("sub", &[a.clone(), b.clone()], |i| i[0].sub(&i[1]));
    check("mul", &[a.clone(), b.clone()], |i| i[0].mul(&i[1]));
    check("div", &[a.clone(), pos_b.clone()], |i| i[0].div(&i[1]));
    check("maximum", &[a.clone(), b.clone()], |i| i[0].maximum(&i[1]));
    check("minimum", &[a.clone(), b.clone()], |i| i[0].minimum(&i[1]));
    check("pow", &[pos_a.clone(), pos_b.clone()], |i| i[0].pow(&i[1]));
    check("operators", &[a.clone(), b.clone()], |i| {
        ((&i[0] * &i[1])? - 2.0)? / 3.0
    });
    let cond = randn(&[3, 4])
        .gt(&Tensor::new(0f64, &CPU).unwrap())
        .unwrap();
    check("where_cond", &[a.clone(), b.clone()], move |i| {
        cond.where_cond(&i[0], &i[1])
    });
}

#[test]
fn reductions() {
    let x = randn(&[3, 4, 5]);
    check("sum", &[x.clone()], |i| i[0].sum(1usize));
    check("sum_multi_keepdim", &[x.clone()], |i| {
        i[0].sum_keepdim([0usize, 2])
    });
    check("sum_all", &[x.clone()], |i| i[0].sum_all());
    check("mean", &[x.clone()], |i| i[0].mean([1usize, 2]));
    check("max", &[x.clone()], |i| i[0].max(2usize));
    check("min_keepdim", &[x.clone()], |i| i[0].min_keepdim(0usize));
    check("var", &[x.clone()], |i| i[0].var(2usize));
    check("cumsum", &[x.clone()], |i| i[0].cumsum(1usize));
    check("topk_values", &[x.clone()], |i| Ok(i[0].topk(2, 2usize)?.0));
}

#[test]
fn matmul_and_views() {
    let a = randn(&[2, 3, 4]);
    let b = randn(&[4, 5]);
    check("matmul_broadcast", &[a.clone(), b.clone()], |i| {
        i[0].matmul(&i[1])
    });
    let c = randn(&[2, 5, 4]);
    check("matmul_transposed_view", &[a.clone(), c.clone()], |i| {
        i[0].matmul(&i[1].t()?)
    });
    check("matvec", &[b.clone(), randn(&[5])], |i| i[0].matmul(&i[1]));
    check("transpose", &[a.clone()], |i| {
        i[0].transpose(0, 2)?.contiguous()
    });
    check("permute", &[a.clone()], |i| i[0].permute(&[2, 0, 1]));
    check("narrow", &[a.clone()], |i| i[0].narrow(2, 1, 2));
    check("reshape", &[a.clone()], |i| i[0].t()?.reshape((4, 6)));
    check("broadcast_as", &[randn(&[3, 1])], |i| {
        i[0].broadcast_as((2, 3, 4))
    });
    check("cat", &[a.clone(), randn(&[2, 2, 4])], |i| {
        Tensor::cat(&[&i[0], &i[1]], 1)
    });
    check("stack", &[b.clone(), randn(&[4, 5])], |i| {
        Tensor::stack(&[&i[0], &i[1]], 1)
    });
    check("pad", &[a.clone()], |i| {
        i[0].pad(&[(0, 0), (1, 2), (0, 1)], 0.5)
    });
    check("chunk", &[a.clone()], |i| {
        let c = i[0].chunk(2, 2)?;
        c[0].mul(&c[1])
    });
    check("squeeze_unsqueeze_flatten", &[a.clone()], |i| {
        i[0].unsqueeze(1)?.squeeze(1)?.flatten(0, 1)
    });
}

#[test]
fn indexing() {
    let x = randn(&[4, 3]);
    let ids = Tensor::new([2u32, 0, 2, 3], &CPU).unwrap();
    let ids2 = ids.clone();
    check("index_select", &[x.clone()], move |i| {
        i[0].index_select(&ids2, 0)
    });
    let ids2 = ids.clone();
    check("embedding", &[x.clone()], move |i| {
        i[0].embedding(&ids2.reshape((2, 2))?)
    });
    let g = Tensor::new([[0u32, 2], [1, 1], [2, 0], [0, 0]], &CPU).unwrap();
    let g2 = g.clone();
    check("gather", &[x.clone()], move |i| i[0].gather(&g2, 1));
    let sids = Tensor::new([[0u32, 2], [1, 0], [2, 1], [0, 2]], &CPU).unwrap();
    let s2 = sids.clone();
    check("scatter_add", &[x.clone(), randn(&[4, 2])], move |i| {
        i[0].scatter_add(&s2, &i[1], 1)
    });
    let s2 = sids.clone();
    check("scatter", &[x.clone(), randn(&[4, 2])], move |i| {
        i[0].scatter(&s2, &i[1], 1)
    });
    let ia = Tensor::new([1u32, 1, 3], &CPU).unwrap();
    check("index_add", &[x.clone(), randn(&[3, 3])], move |i| {
        i[0].index_add(&ia, &i[1], 0)
    });
}

#[test]
fn neural_primitives() {
    let x = randn(&[2, 3, 6]);
    check("softmax_last", &[x.clone()], |i| i[0].softmax(2usize));
    check("softmax_mid", &[x.clone()], |i| i[0].softmax(1usize));
    check("log_softmax", &[x.clone()], |i| i[0].log_softmax(2usize));
    check("softmax_composite", &[x.clone()], |i| {
        i[0].softmax_composite(2usize, false)
    });
    let (w, b) = (randn(&[6]), randn(&[6]));
    check("layer_norm", &[x.clone(), w.clone(), b.clone()], |i| {
        i[0].layer_norm(&i[1], Some(&i[2]), 1e-5)
    });
    check("layer_norm_no_bias", &[x.clone(), w.clone()], |i| {
        i[0].layer_norm(&i[1], None, 1e-5)
    });
    check("rms_norm", &[x.clone(), w.clone()], |i| {
        i[0].rms_norm(&i[1], 1e-5)
    });
    let q = randn(&[1, 2, 3, 4]);
    let (cos, sin) = (randn(&[3, 2]), randn(&[3, 2]));
    for kind in [RopeKind::Interleaved, RopeKind::HalfSplit] {
        check("rope", &[q.clone(), cos.clone(), sin.clone()], move |i| {
            i[0].rotary_emb(&i[1], &i[2], kind)
        });
    }
    let (q, k, v) = (
        randn(&[1, 4, 3, 4]),
        randn(&[1, 2, 5, 4]),
        randn(&[1, 2, 5, 3]),
    );
    check("sdpa_gqa_causal", &[q.clone(), k.clone(), v.clone()], |i| {
        Tensor::scaled_dot_product_attention(&i[0], &i[1], &i[2], AttentionMask::Causal, None)
    });
    let add = randn(&[3, 5]);
    check(
        "sdpa_additive",
        &[q.clone(), k.clone(), v.clone()],
        move |i| {
            Tensor::scaled_dot_product_attention(
                &i[0],
                &i[1],
                &i[2],
                AttentionMask::Additive(&add),
                Some(0.3),
            )
        },
    );
}

#[test]
fn graph_records_op_names() {
    let x = randn(&[2, 2]).variable();
    let y = x.mul(&x).unwrap().affine(2.0, 1.0).unwrap();
    let names: Vec<_> = y.walk_graph().iter().filter_map(|t| t.op_name()).collect();
    assert_eq!(names, vec!["mul", "affine"]);
    assert!(
        randn(&[2]).sum_all().unwrap().backward().is_err(),
        "no variable, no backward"
    );
}

/// A custom op whose backward is deliberately wrong: the harness must catch it (and the
/// correct one must pass), so the checks above can really fail.
#[test]
fn harness_detects_a_wrong_gradient() {
    use hanzo_ml::{CpuStorage, CustomOp1, Layout, Shape};
    struct Cube {
        wrong: bool,
    }
    impl CustomOp1 for Cube {
        fn name(&self) -> &'static str {
            "cube"
        }
        fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
            let v = s.as_slice::<f64>()?;
            Ok((
                CpuStorage::from_vec(l.offsets().map(|o| v[o].powi(3)).collect::<Vec<_>>()),
                l.shape().clone(),
            ))
        }
        fn bwd(&self, x: &Tensor, _: &Tensor, g: &Tensor) -> Result<Tensor> {
            let k = if self.wrong { 2.9 } else { 3.0 };
            g.mul(&x.sqr()?.affine(k, 0.0)?)
        }
    }
    let x = randn(&[5]);
    check("cube_right", &[x.clone()], |i| {
        i[0].apply_op1(Cube { wrong: false })
    });
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        check("cube_wrong", &[x.clone()], |i| {
            i[0].apply_op1(Cube { wrong: true })
        })
    }))
    .is_err();
    assert!(caught, "a 3% gradient error went unnoticed");
}

#[test]
fn convolutions_and_pooling() {
    use hanzo_ml::Conv2dParams;
    let p = Conv2dParams {
        padding: (1, 0),
        stride: (2, 1),
        dilation: (1, 2),
        groups: 2,
    };
    check(
        "conv2d",
        &[randn(&[1, 4, 5, 6]), randn(&[2, 2, 2, 2])],
        move |i| i[0].conv2d_with(&i[1], &p),
    );
    check("conv1d", &[randn(&[2, 2, 7]), randn(&[3, 2, 3])], |i| {
        i[0].conv1d(&i[1], 1, 2, 1, 1)
    });
    let q = Conv2dParams {
        padding: (1, 0),
        stride: (2, 1),
        dilation: (1, 2),
        groups: 2,
    };
    check(
        "conv_transpose2d",
        &[randn(&[1, 2, 3, 3]), randn(&[2, 2, 2, 2])],
        move |i| i[0].conv_transpose2d_with(&i[1], &q, (1, 0)),
    );
    check(
        "conv_transpose1d",
        &[randn(&[1, 2, 4]), randn(&[2, 3, 3])],
        |i| i[0].conv_transpose1d(&i[1], 1, 1, 2, 1, 1),
    );
    check("avg_pool2d", &[randn(&[1, 2, 5, 4])], |i| {
        i[0].avg_pool2d((2, 2), (2, 1))
    });
    check("max_pool2d", &[randn(&[1, 2, 5, 4])], |i| {
        i[0].max_pool2d((2, 2), (1, 2))
    });
    check("upsample_nearest2d", &[randn(&[1, 2, 2, 3])], |i| {
        i[0].upsample_nearest2d(5, 4)
    });
    check("upsample_nearest1d", &[randn(&[1, 2, 3])], |i| {
        i[0].upsample_nearest1d(7)
    });
}

/// A cast passes the gradient through (converted back to the input's dtype). Finite
/// differences are meaningless across an f32 cast, so compare with d(x^2)/dx = 2x directly.
#[test]
fn to_dtype_passes_gradients() {
    let x = randn(&[7]).variable();
    let y = x
        .to_dtype(DType::F32)
        .unwrap()
        .sqr()
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap();
    let g = y
        .sum_all()
        .unwrap()
        .backward()
        .unwrap()
        .get(&x)
        .unwrap()
        .clone();
    assert_eq!(g.dtype(), DType::F64);
    for (g, x) in g
        .to_vec1::<f64>()
        .unwrap()
        .iter()
        .zip(x.to_vec1::<f64>().unwrap())
    {
        assert!(
            (g - 2.0 * x).abs() <= 1e-6 * (1.0 + x.abs()),
            "{g} vs {}",
            2.0 * x
        );
    }
}
