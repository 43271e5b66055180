//! Every SIMD kernel set this CPU can run (`Kernels::available()`) against the scalar set and
//! against f64 math, on random inputs of many lengths (so bodies, unrolled bodies and tails
//! are all exercised), plus special values. Tolerances:
//!
//! * add/sub/mul/div/maximum/minimum: bit-exact against scalar (IEEE ops are correctly
//!   rounded; NaN compared as NaN).
//! * max: exact (NaN if any element is NaN, -inf when empty).
//! * sum/dot: |err| <= (n/8 + 8) * eps * sum|terms| against f64 (a rigorous bound for
//!   8-lane accumulation plus the final reduction).
//! * exp: <= 2 ulp against f64 exp rounded (measured ~1 ulp), over the full f32 range,
//!   subnormal results included; overflow to +inf, underflow to 0, NaN stays NaN.
//! * silu: relative error <= 4 eps against f64 for |x| <= 80.
//! * softmax: relative error <= 1e-5 per element; log_softmax: abs error
//!   <= 1e-5 (1 + |y|) + 4 eps |x| (x - logsumexp cancels, so |x| sets the floor).
//! * rms_norm / layer_norm: abs error <= 1e-5 * (1 + |y|).
//! * f16/bf16 tensor paths: within the dtype's rounding (2^-10 / 2^-7 relative) of f32.

use hanzo_ml::cpu::simd::{kernels, Kernels};
use hanzo_ml::{DType, Device, Tensor};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const LENS: [usize; 13] = [0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 100, 1000, 4097];
const EPS: f64 = f32::EPSILON as f64;

fn rand_vec(rng: &mut StdRng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(lo..hi)).collect()
}

fn sets() -> Vec<Kernels> {
    let all = Kernels::available();
    assert_eq!(all[0].name, "scalar");
    eprintln!(
        "kernel sets: {:?}",
        all.iter().map(|k| k.name).collect::<Vec<_>>()
    );
    all
}

/// Distance in ulps of f32 `y` from the exact value `t`, measured in ulps of `t` rounded to
/// f32 (subnormal ulp for tiny values).
fn ulps(y: f32, t: f64) -> f64 {
    let tf = t as f32;
    if tf.is_infinite() || y.is_infinite() {
        return if y == tf { 0.0 } else { f64::INFINITY };
    }
    let ulp = if tf.abs() < f32::MIN_POSITIVE {
        2f64.powi(-149)
    } else {
        let e = tf.abs().log2().floor() as i32;
        2f64.powi(e - 23)
    };
    (y as f64 - t).abs() / ulp
}

type Bin = fn(&[f32], &[f32], &mut [f32]);

fn same_bits(a: f32, b: f32) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}

#[test]
fn dispatch_picks_best_available() {
    let all = sets();
    let chosen = kernels().name;
    let want = hanzo_ml::cpu::simd::Kernels::for_isa(hanzo_ml::cpu::features::isa());
    assert_eq!(chosen, want.name);
    if std::env::var_os("HANZO_ISA").is_none() {
        assert_eq!(chosen, all.last().unwrap().name);
    }
}

#[test]
fn sum_dot_max() {
    let mut rng = StdRng::seed_from_u64(1);
    for k in sets() {
        for n in LENS {
            let a = rand_vec(&mut rng, n, -10.0, 10.0);
            let b = rand_vec(&mut rng, n, -10.0, 10.0);
            let bound = |abs: f64| (n as f64 / 8.0 + 8.0) * EPS * abs + 1e-30;

            let s64: f64 = a.iter().map(|&x| x as f64).sum();
            let abs: f64 = a.iter().map(|&x| (x as f64).abs()).sum();
            let s = (k.sum)(&a) as f64;
            assert!(
                (s - s64).abs() <= bound(abs),
                "{} sum n={n}: {s} vs {s64}",
                k.name
            );

            let d64: f64 = a.iter().zip(&b).map(|(&x, &y)| x as f64 * y as f64).sum();
            let abs: f64 = a
                .iter()
                .zip(&b)
                .map(|(&x, &y)| (x as f64 * y as f64).abs())
                .sum();
            let d = (k.dot)(&a, &b) as f64;
            assert!(
                (d - d64).abs() <= bound(abs),
                "{} dot n={n}: {d} vs {d64}",
                k.name
            );

            // axpy: one rounding of the fused product and sum (or two, unfused), per element.
            let mut o = b.clone();
            (k.axpy)(-1.5, &a, &mut o);
            for i in 0..n {
                let want = (b[i] as f64) - 1.5 * (a[i] as f64);
                let tol = 2.0 * f32::EPSILON as f64 * (b[i].abs() as f64 + 1.5 * a[i].abs() as f64);
                assert!(
                    (o[i] as f64 - want).abs() <= tol,
                    "{} axpy n={n} at {i}: {} vs {want}",
                    k.name,
                    o[i]
                );
            }

            let m = (k.max)(&a);
            let m_ref = a.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(m, m_ref, "{} max n={n}", k.name);
            assert_eq!(
                m,
                (Kernels::SCALAR.max)(&a),
                "{} max vs scalar n={n}",
                k.name
            );

            // A NaN anywhere (body or tail) makes max NaN.
            for pos in [0, n / 2, n.saturating_sub(1)] {
                if n == 0 {
                    break;
                }
                let mut c = a.clone();
                c[pos] = f32::NAN;
                assert!((k.max)(&c).is_nan(), "{} max NaN at {pos} n={n}", k.name);
            }
        }
        assert_eq!((k.max)(&[]), f32::NEG_INFINITY);
        assert_eq!((k.max)(&[f32::NEG_INFINITY; 9]), f32::NEG_INFINITY);
        assert_eq!((k.sum)(&[]), 0.0);
        // dot uses the common length.
        assert_eq!((k.dot)(&[1.0; 20], &[2.0; 11]), 22.0);
    }
}

#[test]
fn binary_bit_exact() {
    let mut rng = StdRng::seed_from_u64(2);
    let specials = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        1.0,
        f32::MAX,
        f32::MIN_POSITIVE,
        1e-45,
    ];
    for k in sets() {
        let ops: [(&str, Bin, Bin); 6] = [
            ("add", k.add, Kernels::SCALAR.add),
            ("sub", k.sub, Kernels::SCALAR.sub),
            ("mul", k.mul, Kernels::SCALAR.mul),
            ("div", k.div, Kernels::SCALAR.div),
            ("maximum", k.maximum, Kernels::SCALAR.maximum),
            ("minimum", k.minimum, Kernels::SCALAR.minimum),
        ];
        for n in LENS {
            let mut a = rand_vec(&mut rng, n, -100.0, 100.0);
            let mut b = rand_vec(&mut rng, n, -100.0, 100.0);
            // Sprinkle specials and ties in both operands.
            for i in (0..n).step_by(5) {
                a[i] = specials[(i / 5) % specials.len()];
            }
            for i in (0..n).step_by(7) {
                b[i] = specials[(i / 7 + 3) % specials.len()];
            }
            for i in (0..n).step_by(11) {
                b[i] = a[i];
            }
            for (name, f, r) in ops {
                let mut o = vec![7f32; n];
                let mut want = vec![7f32; n];
                f(&a, &b, &mut o);
                r(&a, &b, &mut want);
                for i in 0..n {
                    assert!(
                        same_bits(o[i], want[i]),
                        "{} {name} n={n} i={i}: {}, {} -> {} vs {}",
                        k.name,
                        a[i],
                        b[i],
                        o[i],
                        want[i]
                    );
                }
            }
        }
        // Explicit NaN semantics of maximum/minimum: NaN on either side propagates.
        let (a, b) = ([f32::NAN, 1.0, 0.0, -0.0], [1.0, f32::NAN, -0.0, 0.0]);
        let mut o = [0f32; 4];
        (k.maximum)(&a, &b, &mut o);
        assert!(o[0].is_nan() && o[1].is_nan(), "{}", k.name);
        assert!(o[2].to_bits() == 0f32.to_bits() && o[3].to_bits() == (-0f32).to_bits());
        (k.minimum)(&a, &b, &mut o);
        assert!(o[0].is_nan() && o[1].is_nan(), "{}", k.name);
        // Common length: the output past it is untouched.
        let mut o = [9f32; 12];
        (k.add)(&[1.0; 10], &[2.0; 12], &mut o);
        assert_eq!(&o[..10], &[3.0; 10]);
        assert_eq!(&o[10..], &[9.0; 2]);
    }
}

#[test]
fn exp_accuracy_and_specials() {
    let mut rng = StdRng::seed_from_u64(3);
    for k in sets() {
        // A dense sweep over the whole finite range of exp plus random lengths.
        let sweep: Vec<f32> = (0..200_001)
            .map(|i| -104.0 + 194.0 * i as f32 / 200_000.0)
            .collect();
        let mut inputs = vec![sweep];
        for n in LENS {
            inputs.push(rand_vec(&mut rng, n, -110.0, 95.0));
            inputs.push(rand_vec(&mut rng, n, -1.0, 1.0));
        }
        let mut worst = 0f64;
        for x in &inputs {
            let mut o = vec![0f32; x.len()];
            (k.exp)(x, &mut o);
            for (&xi, &yi) in x.iter().zip(&o) {
                let u = ulps(yi, (xi as f64).exp());
                worst = worst.max(u);
                assert!(
                    u <= 2.0,
                    "{} exp({xi}) = {yi}, want {}, {u} ulp",
                    k.name,
                    (xi as f64).exp()
                );
            }
        }
        eprintln!("{}: exp max error {worst:.3} ulp", k.name);

        let specials = [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            -1e30,
            1e30,
            f32::MAX,
            f32::MIN,
            88.72,
            88.73,
            89.0,
            100.0,
            -87.33,
            -87.34,
            -100.0,
            -103.9,
            -103.98,
            -104.0,
            -150.0,
            0.0,
            -0.0,
            1e-45,
            -1e-45,
        ];
        // In every lane position, including tails.
        for n in [specials.len(), 1, 3, 8, 9, 17] {
            for shift in 0..specials.len() {
                let x: Vec<f32> = (0..n)
                    .map(|i| specials[(i + shift) % specials.len()])
                    .collect();
                let mut o = vec![0f32; n];
                (k.exp)(&x, &mut o);
                for (&xi, &yi) in x.iter().zip(&o) {
                    let t = (xi as f64).exp();
                    if xi.is_nan() {
                        assert!(yi.is_nan(), "{} exp(NaN) = {yi}", k.name);
                    } else if t > f32::MAX as f64 * (1.0 + EPS / 2.0) {
                        assert_eq!(yi, f32::INFINITY, "{} exp({xi})", k.name);
                    } else if t < 2f64.powi(-150) {
                        assert_eq!(yi, 0.0, "{} exp({xi})", k.name);
                    } else {
                        assert!(ulps(yi, t) <= 2.0, "{} exp({xi}) = {yi}, want {t}", k.name);
                    }
                }
            }
        }
    }
}

#[test]
fn silu_matches() {
    let mut rng = StdRng::seed_from_u64(4);
    for k in sets() {
        for n in LENS {
            let x = rand_vec(&mut rng, n, -80.0, 80.0);
            let mut o = vec![0f32; n];
            (k.silu)(&x, &mut o);
            for (&xi, &yi) in x.iter().zip(&o) {
                let t = xi as f64 / (1.0 + (-(xi as f64)).exp());
                assert!(
                    (yi as f64 - t).abs() <= 4.0 * EPS * t.abs() + 1e-37,
                    "{} silu({xi}) = {yi}, want {t}",
                    k.name
                );
            }
        }
        // Specials follow the scalar formula x / (1 + exp(-x)): silu(-inf) = -inf/inf = NaN.
        let x = [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            -100.0,
            100.0,
            0.0,
        ];
        let mut o = [1f32; 6];
        (k.silu)(&x, &mut o);
        assert!(o[0].is_nan() && o[2].is_nan(), "{}", k.name);
        assert_eq!(o[1], f32::INFINITY);
        assert!(o[3] == 0.0 && o[3].is_sign_negative(), "{}", o[3]);
        assert_eq!(o[4], 100.0);
        assert_eq!(o[5], 0.0);
    }
}

fn softmax64(x: &[f32]) -> (Vec<f64>, Vec<f64>) {
    let m = x
        .iter()
        .map(|&v| v as f64)
        .fold(f64::NEG_INFINITY, f64::max);
    let s: f64 = x.iter().map(|&v| (v as f64 - m).exp()).sum();
    let sm = x.iter().map(|&v| (v as f64 - m).exp() / s).collect();
    let lsm = x.iter().map(|&v| v as f64 - m - s.ln()).collect();
    (sm, lsm)
}

#[test]
fn softmax_rows() {
    let mut rng = StdRng::seed_from_u64(5);
    for k in sets() {
        for n in LENS {
            for (lo, hi) in [(-10.0, 10.0), (990.0, 1010.0), (-50.0, 0.0)] {
                let x = rand_vec(&mut rng, n, lo, hi);
                let (sm, lsm) = softmax64(&x);
                let mut o = vec![0f32; n];
                (k.softmax)(&x, &mut o);
                let mut o_ref = vec![0f32; n];
                (Kernels::SCALAR.softmax)(&x, &mut o_ref);
                for i in 0..n {
                    for (y, what) in [(o[i], "simd"), (o_ref[i], "scalar")] {
                        assert!(
                            (y as f64 - sm[i]).abs() <= 1e-5 * sm[i],
                            "{} softmax ({what}) n={n} i={i}: {y} vs {}",
                            k.name,
                            sm[i]
                        );
                    }
                }
                (k.log_softmax)(&x, &mut o);
                (Kernels::SCALAR.log_softmax)(&x, &mut o_ref);
                for i in 0..n {
                    for (y, what) in [(o[i], "simd"), (o_ref[i], "scalar")] {
                        assert!(
                            (y as f64 - lsm[i]).abs()
                                <= 1e-5 * (1.0 + lsm[i].abs()) + 4.0 * EPS * (x[i] as f64).abs(),
                            "{} log_softmax ({what}) n={n} i={i}: {y} vs {}",
                            k.name,
                            lsm[i]
                        );
                    }
                }
            }
        }
        // -inf entries (masking) give exact zeros; a NaN poisons the row.
        let mut x = vec![0f32; 19];
        x[3] = f32::NEG_INFINITY;
        x[18] = f32::NEG_INFINITY;
        let mut o = vec![0f32; 19];
        (k.softmax)(&x, &mut o);
        assert_eq!(o[3], 0.0);
        assert_eq!(o[18], 0.0);
        assert!((o[0] - 1.0 / 17.0).abs() < 1e-7);
        x[5] = f32::NAN;
        (k.softmax)(&x, &mut o);
        assert!(o.iter().all(|v| v.is_nan()), "{}", k.name);
    }
}

#[test]
fn norms() {
    let mut rng = StdRng::seed_from_u64(6);
    let eps = 1e-5f32;
    for k in sets() {
        for n in LENS.into_iter().filter(|&n| n > 0) {
            let x = rand_vec(&mut rng, n, -3.0, 5.0);
            let w = rand_vec(&mut rng, n, 0.5, 1.5);
            let b = rand_vec(&mut rng, n, -1.0, 1.0);
            let x64: Vec<f64> = x.iter().map(|&v| v as f64).collect();
            let nf = n as f64;
            let check = |o: &[f32], want: &[f64], what: &str| {
                for i in 0..n {
                    assert!(
                        (o[i] as f64 - want[i]).abs() <= 1e-5 * (1.0 + want[i].abs()),
                        "{} {what} n={n} i={i}: {} vs {}",
                        k.name,
                        o[i],
                        want[i]
                    );
                }
            };

            let r = 1.0 / (x64.iter().map(|v| v * v).sum::<f64>() / nf + eps as f64).sqrt();
            let want: Vec<f64> = (0..n).map(|i| x64[i] * r * w[i] as f64).collect();
            let mut o = vec![0f32; n];
            (k.rms_norm)(&x, &w, eps, &mut o);
            check(&o, &want, "rms_norm");
            (Kernels::SCALAR.rms_norm)(&x, &w, eps, &mut o);
            check(&o, &want, "rms_norm (scalar)");

            let mean = x64.iter().sum::<f64>() / nf;
            let var = x64.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / nf;
            let r = 1.0 / (var + eps as f64).sqrt();
            for bias in [None, Some(&b[..])] {
                let want: Vec<f64> = (0..n)
                    .map(|i| (x64[i] - mean) * r * w[i] as f64 + bias.map_or(0.0, |b| b[i] as f64))
                    .collect();
                (k.layer_norm)(&x, &w, bias, eps, &mut o);
                check(&o, &want, "layer_norm");
                (Kernels::SCALAR.layer_norm)(&x, &w, bias, eps, &mut o);
                check(&o, &want, "layer_norm (scalar)");
            }
        }
    }
}

/// The tensor paths that use the kernels: f32 contiguous unary/binary, and f16/bf16 through
/// block conversion, on sizes above and below the parallel threshold.
#[test]
fn tensor_paths_f32_f16_bf16() -> hanzo_ml::Result<()> {
    let cpu = Device::Cpu;
    let mut rng = StdRng::seed_from_u64(7);
    for n in [1usize, 17, 1000, 70_001] {
        let a = rand_vec(&mut rng, n, -4.0, 4.0);
        let b = rand_vec(&mut rng, n, 0.5, 4.0);
        let ta = Tensor::from_vec(a.clone(), n, &cpu)?;
        let tb = Tensor::from_vec(b.clone(), n, &cpu)?;
        type F = fn(f64, f64) -> f64;
        let cases: [(&str, F); 8] = [
            ("add", |x, y| x + y),
            ("sub", |x, y| x - y),
            ("mul", |x, y| x * y),
            ("div", |x, y| x / y),
            ("maximum", |x, y| x.max(y)),
            ("exp", |x, _| x.exp()),
            ("silu", |x, _| x / (1.0 + (-x).exp())),
            ("relu", |x, _| x.max(0.0)),
        ];
        for (dt, rel) in [
            (DType::F32, 4.0 * EPS),
            (DType::F16, 2e-3),
            (DType::BF16, 1.6e-2),
        ] {
            let (xa, xb) = (ta.to_dtype(dt)?, tb.to_dtype(dt)?);
            // The rounded inputs, so only the op's own rounding is measured.
            let a64 = xa.to_dtype(DType::F64)?.to_vec1::<f64>()?;
            let b64 = xb.to_dtype(DType::F64)?.to_vec1::<f64>()?;
            for (name, f) in cases {
                let y = match name {
                    "add" => xa.add(&xb)?,
                    "sub" => xa.sub(&xb)?,
                    "mul" => xa.mul(&xb)?,
                    "div" => xa.div(&xb)?,
                    "maximum" => xa.maximum(&xb)?,
                    "exp" => xa.exp()?,
                    "silu" => xa.silu()?,
                    _ => xa.relu()?,
                };
                assert_eq!(y.dtype(), dt);
                let y = y.to_dtype(DType::F64)?.to_vec1::<f64>()?;
                for i in 0..n {
                    let t = f(a64[i], b64[i]);
                    assert!(
                        (y[i] - t).abs() <= rel * t.abs() + 1e-6,
                        "{dt:?} {name} n={n} i={i}: {} vs {t}",
                        y[i]
                    );
                }
            }
        }
    }
    Ok(())
}

#[test]
fn tensor_rows_f16_bf16() -> hanzo_ml::Result<()> {
    let cpu = Device::Cpu;
    let mut rng = StdRng::seed_from_u64(8);
    let (rows, d) = (5usize, 33usize);
    let x = Tensor::from_vec(rand_vec(&mut rng, rows * d, -3.0, 3.0), (rows, d), &cpu)?;
    let w = Tensor::from_vec(rand_vec(&mut rng, d, 0.5, 1.5), d, &cpu)?;
    let b = Tensor::from_vec(rand_vec(&mut rng, d, -0.5, 0.5), d, &cpu)?;
    let (t, hd) = (3usize, 8usize);
    let xr = Tensor::from_vec(
        rand_vec(&mut rng, 2 * 2 * t * hd, -1.0, 1.0),
        (2, 2, t, hd),
        &cpu,
    )?;
    let ang = rand_vec(&mut rng, t * hd / 2, -3.0, 3.0);
    let cos = Tensor::from_vec(ang.iter().map(|a| a.cos()).collect(), (t, hd / 2), &cpu)?;
    let sin = Tensor::from_vec(ang.iter().map(|a| a.sin()).collect(), (t, hd / 2), &cpu)?;
    for (dt, tol) in [(DType::F16, 4e-3), (DType::BF16, 3e-2)] {
        let c = |t: &Tensor| t.to_dtype(dt);
        let xd = c(&x)?;
        // Reference: f32 on the same rounded inputs.
        let x32 = xd.to_dtype(DType::F32)?;
        let w32 = c(&w)?.to_dtype(DType::F32)?;
        let b32 = c(&b)?.to_dtype(DType::F32)?;
        let xr32 = c(&xr)?.to_dtype(DType::F32)?;
        let cos32 = c(&cos)?.to_dtype(DType::F32)?;
        let sin32 = c(&sin)?.to_dtype(DType::F32)?;
        let pairs = [
            ("softmax", xd.softmax(1)?, x32.softmax(1)?),
            ("log_softmax", xd.log_softmax(1)?, x32.log_softmax(1)?),
            (
                "rms_norm",
                xd.rms_norm(&c(&w)?, 1e-5)?,
                x32.rms_norm(&w32, 1e-5)?,
            ),
            (
                "layer_norm",
                xd.layer_norm(&c(&w)?, Some(&c(&b)?), 1e-5)?,
                x32.layer_norm(&w32, Some(&b32), 1e-5)?,
            ),
            (
                "rope",
                c(&xr)?.rope(&c(&cos)?, &c(&sin)?)?,
                xr32.rope(&cos32, &sin32)?,
            ),
            (
                "rope_i",
                c(&xr)?.rope_i(&c(&cos)?, &c(&sin)?)?,
                xr32.rope_i(&cos32, &sin32)?,
            ),
        ];
        for (name, got, want) in pairs {
            assert_eq!(got.dtype(), dt, "{name}");
            let got = got.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
            let want = want.flatten_all()?.to_vec1::<f32>()?;
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= tol * (1.0 + w.abs()),
                    "{dt:?} {name} i={i}: {g} vs {w}"
                );
            }
        }
    }
    Ok(())
}

/// Both rope layouts in every kernel set against f64 math, for head dims with and without
/// vector tails (each rotation is a 2x2 product: two roundings plus one FMA difference).
#[test]
fn rope_rows() {
    let mut rng = StdRng::seed_from_u64(11);
    for d in [2usize, 6, 8, 14, 16, 18, 64, 66, 128] {
        let x = rand_vec(&mut rng, d, -3.0, 3.0);
        let ang = rand_vec(&mut rng, d / 2, -3.0, 3.0);
        let (c, s): (Vec<f32>, Vec<f32>) = ang.iter().map(|a| (a.cos(), a.sin())).unzip();
        for k in sets() {
            for (interleaved, f) in [(true, k.rope_interleaved), (false, k.rope_halfsplit)] {
                let mut out = vec![f32::NAN; d];
                f(&x, &c, &s, &mut out);
                for i in 0..d / 2 {
                    let (ia, ib) = if interleaved {
                        (2 * i, 2 * i + 1)
                    } else {
                        (i, i + d / 2)
                    };
                    let (a, b, cc, ss) = (x[ia] as f64, x[ib] as f64, c[i] as f64, s[i] as f64);
                    for (got, want) in [(out[ia], a * cc - b * ss), (out[ib], a * ss + b * cc)] {
                        assert!(
                            (got as f64 - want).abs() <= 4.0 * EPS * (a.abs() + b.abs()),
                            "{} rope interleaved={interleaved} d={d} pair {i}: {got} vs {want}",
                            k.name
                        );
                    }
                }
            }
        }
    }
}
