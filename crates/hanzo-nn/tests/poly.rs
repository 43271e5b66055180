//! FHE-friendly polynomial layers: accuracy of each approximation, the add/mul-only property
//! proven from the recorded op graph, and conversion of a trained model.

use hanzo_ml::{DType, Device, Tensor};
use hanzo_nn::poly::graph::{ops_outside, recorded_ops, ARITHMETIC, DATA_MOVEMENT, LINEAR};
use hanzo_nn::poly::*;
use hanzo_nn::*;

const CPU: Device = Device::Cpu;

fn grid(a: f64, b: f64, n: usize) -> Tensor {
    let v: Vec<f64> = (0..n)
        .map(|i| a + (b - a) * i as f64 / (n - 1) as f64)
        .collect();
    Tensor::from_vec(v, n, &CPU).unwrap()
}

fn max_abs_err(got: &Tensor, f: impl Fn(f64) -> f64, x: &Tensor) -> f64 {
    let g = got.to_vec1::<f64>().unwrap();
    let xs = x.to_vec1::<f64>().unwrap();
    g.iter()
        .zip(&xs)
        .map(|(g, x)| (g - f(*x)).abs())
        .fold(0.0, f64::max)
}

#[test]
fn chebyshev_reproduces_polynomials_and_converges_on_smooth_functions() {
    let cubic = |x: f64| x * x * x - 2.0 * x + 0.5;
    let p = Chebyshev::fit(cubic, -2.0, 3.0, 3).unwrap();
    assert!(p.max_error(cubic, 1001) < 1e-12);
    let e = Chebyshev::fit(f64::exp, -1.0, 1.0, 12).unwrap();
    assert!(
        e.max_error(f64::exp, 1001) < 1e-12,
        "{}",
        e.max_error(f64::exp, 1001)
    );
    // Tensor Clenshaw agrees with the scalar one.
    let x = grid(-1.0, 1.0, 257);
    assert!(max_abs_err(&e.eval(&x).unwrap(), |v| e.eval_f64(v), &x) < 1e-14);
    assert!(
        Chebyshev::fit(f64::ln, -1.0, 1.0, 4).is_err(),
        "ln is not finite on [-1, 1]"
    );
    assert!(Chebyshev::fit(f64::exp, 1.0, 1.0, 4).is_err());
}

/// The error table of the README: each approximation on its interval.
#[test]
fn approximation_error_table() {
    let rows: Vec<(&str, Activation, f64, f64, usize, f64)> = vec![
        ("GELU (erf)", Activation::GeluErf, -8.0, 8.0, 31, 2e-3),
        ("GELU (tanh)", Activation::GeluTanh, -8.0, 8.0, 31, 2e-3),
        ("SiLU", Activation::Silu, -8.0, 8.0, 31, 1e-3),
        ("sigmoid", Activation::Sigmoid, -8.0, 8.0, 31, 1e-4),
        ("tanh", Activation::Tanh, -4.0, 4.0, 31, 1e-4),
        ("ReLU", Activation::Relu, -4.0, 4.0, 31, 0.1),
    ];
    println!("| function | interval | degree | max abs error |");
    println!("|---|---|---|---|");
    for (name, act, a, b, deg, bound) in rows {
        let p = PolyActivation::new(act, a, b, deg).unwrap();
        let err = p.max_error();
        // The tensor path gives the same numbers as the scalar reference.
        let x = grid(a, b, 4001);
        let f = target_fn(act).unwrap();
        let terr = max_abs_err(&p.forward(&x).unwrap(), &f, &x);
        assert!((terr - err).abs() < 1e-3 * err.max(1e-9) + 1e-12 || terr <= err);
        println!("| {name} | [{a}, {b}] | {deg} | {err:.2e} |");
        assert!(err < bound, "{name}: {err} >= {bound}");
    }
    let exp = PolyActivation::exp(-8.0, 0.0, 15).unwrap();
    let err = exp.max_error(f64::exp, 10_001);
    println!("| exp | [-8, 0] | 15 | {err:.2e} |");
    assert!(err < 1e-6);
    // Wide ranges: fit exp(x / 2^r) and square r times; relative error stays small.
    let wide = PolyExp::new(-20.0, 20.0, 10).unwrap();
    let rel = (0..=4000)
        .map(|i| -20.0 + 40.0 * i as f64 / 4000.0)
        .map(|x| (wide.eval_f64(x) / x.exp() - 1.0).abs())
        .fold(0.0, f64::max);
    println!("| exp (scaled, 6 squarings) | [-20, 20] | 10 | {rel:.2e} relative |");
    assert!(rel < 1e-8);
    let r = Reciprocal::wide(10.0, 1e6, 1e-7).unwrap();
    let rw = (0..=1000)
        .map(|i| 10f64.powf(1.0 + 5.0 * i as f64 / 1000.0))
        .map(|a| (r.eval_f64(a) * a - 1.0).abs())
        .fold(0.0, f64::max);
    println!(
        "| 1/x (constant guess, Newton x{}) | [10, 1e6] | 0 | {rw:.2e} relative |",
        r.iterations()
    );
    assert!(rw < 1e-7);
    // The degree-7 Taylor GELU: fine near 0, useless far out (which is why the fit exists).
    let gelu = target_fn(Activation::GeluTanh).unwrap();
    let taylor_err = |r: f64| {
        (0..=2000)
            .map(|i| -r + 2.0 * r * i as f64 / 2000.0)
            .map(|x| (PolyGeluTaylor::eval_f64(x) - gelu(x)).abs())
            .fold(0.0, f64::max)
    };
    println!(
        "| GELU, degree-7 tanh Taylor | [-1, 1] | 7 in u (22 in x) | {:.2e} |",
        taylor_err(1.0)
    );
    println!(
        "| GELU, degree-7 tanh Taylor | [-2, 2] | 7 in u (22 in x) | {:.2e} |",
        taylor_err(2.0)
    );
    assert!(taylor_err(1.0) < 1e-2 && taylor_err(2.0) > 0.05);
    let x = grid(-1.5, 1.5, 301);
    let t = PolyGeluTaylor.forward(&x).unwrap();
    assert!(max_abs_err(&t, PolyGeluTaylor::eval_f64, &x) < 1e-12);

    let recip = Reciprocal::new(0.5, 8.0, 6, 4).unwrap();
    let rerr = (0..=1000)
        .map(|i| 0.5 + 7.5 * i as f64 / 1000.0)
        .map(|a| (recip.eval_f64(a) - 1.0 / a).abs())
        .fold(0.0, f64::max);
    println!("| 1/x (Newton x4) | [0.5, 8] | 6 | {rerr:.2e} |");
    assert!(rerr < 1e-12);
    let isqrt = InvSqrt::new(0.1, 10.0, 6, 5).unwrap();
    let ierr = (0..=1000)
        .map(|i| 0.1 + 9.9 * i as f64 / 1000.0)
        .map(|a| (isqrt.eval_f64(a) - 1.0 / a.sqrt()).abs())
        .fold(0.0, f64::max);
    println!("| 1/sqrt(x) (Newton x5) | [0.1, 10] | 6 | {ierr:.2e} |");
    assert!(ierr < 1e-10);
    let x = grid(0.5, 8.0, 101);
    assert!(max_abs_err(&recip.eval(&x).unwrap(), |a| 1.0 / a, &x) < 1e-12);
}

#[test]
fn softmax_and_layer_norm_approximations_match_the_exact_layers() {
    let x = Tensor::from_vec(
        (0..24)
            .map(|i| ((i * 7 % 11) as f64 - 5.0) * 0.6)
            .collect::<Vec<_>>(),
        (3, 8),
        &CPU,
    )
    .unwrap();
    let exact = x.softmax(1).unwrap().to_vec2::<f64>().unwrap();
    let sm = PolySoftmax::new(-4.0, 4.0, 8, 12).unwrap();
    let got = sm.forward(&x).unwrap().to_vec2::<f64>().unwrap();
    for (g, e) in got.iter().flatten().zip(exact.iter().flatten()) {
        assert!((g - e).abs() < 1e-4, "{g} vs {e}");
    }
    let w = Tensor::from_vec(vec![1.0, 0.5, 2.0, -1.0, 1.0, 1.0, 0.3, 1.2], 8, &CPU).unwrap();
    let b = Tensor::from_vec(vec![0.1; 8], 8, &CPU).unwrap();
    let ln = LayerNorm::new(w, Some(b.into()), 1e-5);
    let pln = PolyLayerNorm::new(&ln, 1.0, 8.0, 6, 4).unwrap();
    let exact = ln.forward(&x).unwrap().to_vec2::<f64>().unwrap();
    let got = pln.forward(&x).unwrap().to_vec2::<f64>().unwrap();
    for (g, e) in got.iter().flatten().zip(exact.iter().flatten()) {
        assert!((g - e).abs() < 1e-8, "{g} vs {e}");
    }
}

#[test]
fn polynomial_layers_record_only_additions_and_multiplications() {
    let allowed: &[&[&str]] = &[ARITHMETIC, DATA_MOVEMENT];
    let x = Tensor::from_vec(
        (0..32).map(|i| i as f64 / 8.0 - 2.0).collect::<Vec<_>>(),
        (4, 8),
        &CPU,
    )
    .unwrap()
    .variable();
    let w = Tensor::ones(8, DType::F64, &CPU).unwrap();
    let ln = LayerNorm::new(w.clone(), Some(w.zeros_like().unwrap().into()), 1e-5);
    let layers: Vec<(&str, Box<dyn Module>)> = vec![
        (
            "PolyActivation(GELU)",
            Box::new(PolyActivation::new(Activation::GeluErf, -3.0, 3.0, 15).unwrap()),
        ),
        (
            "PolyActivation(SiLU)",
            Box::new(PolyActivation::new(Activation::Silu, -3.0, 3.0, 15).unwrap()),
        ),
        (
            "PolyActivation(sigmoid)",
            Box::new(PolyActivation::new(Activation::Sigmoid, -3.0, 3.0, 15).unwrap()),
        ),
        ("PolyGeluTaylor", Box::new(PolyGeluTaylor)),
        (
            "PolySoftmax",
            Box::new(PolySoftmax::new(-3.0, 3.0, 8, 12).unwrap()),
        ),
        (
            "PolyLayerNorm",
            Box::new(PolyLayerNorm::new(&ln, 0.5, 4.0, 6, 3).unwrap()),
        ),
    ];
    for (name, layer) in &layers {
        let y = layer.forward(&x).unwrap();
        let bad = ops_outside(&y, allowed);
        assert!(bad.is_empty(), "{name} uses {bad:?}");
        assert!(
            recorded_ops(&y).contains("mul"),
            "{name}: nothing recorded?"
        );
    }
    let img = Tensor::ones((1, 2, 4, 4), DType::F64, &CPU)
        .unwrap()
        .variable();
    let pooled = AvgPool2d(2).forward(&img).unwrap();
    assert!(
        ops_outside(&pooled, &[ARITHMETIC, DATA_MOVEMENT, LINEAR]).is_empty(),
        "{:?}",
        recorded_ops(&pooled)
    );

    // The walker does catch non-polynomial ops: the exact layers fail the same check.
    for (name, y) in [
        ("GELU", Activation::GeluErf.forward(&x).unwrap()),
        ("softmax", Softmax.forward(&x).unwrap()),
        ("LayerNorm", ln.forward(&x).unwrap()),
        ("MaxPool2d", MaxPool2d(2).forward(&img).unwrap()),
    ] {
        assert!(
            !ops_outside(&y, allowed).is_empty(),
            "{name} passed: {:?}",
            recorded_ops(&y)
        );
    }
}

#[test]
fn converting_a_trained_model_swaps_layers_and_keeps_its_accuracy() {
    // A tiny two-class problem: the sign of x0 * x1, learned by an MLP with GELU and softmax.
    hanzo_ml::manual_seed(3);
    let n = 256;
    let xs: Vec<f32> = (0..2 * n)
        .map(|i| (((i * 37 + 11) % 97) as f32 / 48.5) - 1.0)
        .collect();
    let ys: Vec<u32> = xs.chunks(2).map(|p| (p[0] * p[1] > 0.0) as u32).collect();
    let x = Tensor::from_vec(xs, (n, 2), &CPU).unwrap();
    let y = Tensor::from_vec(ys, n, &CPU).unwrap();
    let map = VarMap::new();
    let vb = VarBuilder::from_varmap(&map, DType::F32, &CPU);
    let model = Sequential::new()
        .add(Linear::load(2, 16, true, &vb.pp("a")).unwrap())
        .add(Activation::GeluErf)
        .add(LayerNorm::load(16, 1e-5, &vb.pp("n")).unwrap())
        .add(Linear::load(16, 2, true, &vb.pp("b")).unwrap());
    let mut opt = AdamW::new(
        map.all_vars(),
        optim::AdamWConfig {
            lr: 2e-2,
            ..Default::default()
        },
    );
    for _ in 0..300 {
        let loss = loss::cross_entropy(&model.forward_t(&x, true).unwrap(), &y).unwrap();
        opt.backward_step(&loss).unwrap();
    }
    let with_softmax = model.clone().add(Softmax);
    let acc = |m: &Sequential| {
        let p = m
            .forward_t(&x, false)
            .unwrap()
            .argmax(1)
            .unwrap()
            .to_dtype(DType::U32)
            .unwrap();
        p.eq(&y)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
            .mean_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    };
    let exact = acc(&with_softmax);
    assert!(exact > 0.9, "the model did not learn: {exact}");
    let (poly, subs) = to_polynomial(&with_softmax, &x, &PolyConfig::default()).unwrap();
    let kinds: Vec<&str> = subs
        .iter()
        .map(|s| s.what.split(' ').next().unwrap())
        .collect();
    assert_eq!(kinds, vec!["GeluErf", "LayerNorm", "Softmax"]);
    let approx = acc(&poly);
    assert!(exact - approx < 0.03, "accuracy {exact} -> {approx}");
    // The converted model's probabilities stay close to the exact ones.
    let pe = with_softmax.forward_t(&x, false).unwrap();
    let pp = poly.forward_t(&x, false).unwrap();
    let diff = pe
        .sub(&pp)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    assert!(diff < 0.05, "max probability difference {diff}");
}
