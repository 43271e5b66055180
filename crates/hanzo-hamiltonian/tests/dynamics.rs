//! Integrators and HMC against exact solutions and the defining properties: energy
//! conservation, symplecticity (unit Jacobian determinant), 4th-order convergence,
//! reversibility, and HMC moments within Monte Carlo error.

use hanzo_hamiltonian::*;
use hanzo_ml::{DType, Device, Result, Tensor};

const CPU: Device = Device::Cpu;

fn harmonic(q: &Tensor) -> Result<Tensor> {
    q.sqr()?.sum(1)?.affine(0.5, 0.0)
}

fn harmonic_grad(q: &Tensor) -> Result<Tensor> {
    Ok(q.clone())
}

/// A pendulum-like anharmonic potential: U = sum(1 - cos q) + q^4 / 4.
fn anharmonic(q: &Tensor) -> Result<Tensor> {
    q.cos()?
        .affine(-1.0, 1.0)?
        .add(&q.sqr()?.sqr()?.affine(0.25, 0.0)?)?
        .sum(1)
}

fn anharmonic_grad(q: &Tensor) -> Result<Tensor> {
    q.sin()?.add(&q.powf(3.0)?)
}

fn row(v: &[f64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), (1, v.len()), &CPU).unwrap()
}

fn energy(q: &Tensor, p: &Tensor) -> f64 {
    hamiltonian_energy(q, p, harmonic, &Mass::Identity)
        .unwrap()
        .to_vec1::<f64>()
        .unwrap()[0]
}

#[test]
fn leapfrog_conserves_the_harmonic_energy_of_the_standard_vector() {
    // q = [1, 0], p = [0, 1], dt = 0.01, 1000 steps.
    let (q0, p0) = (row(&[1., 0.]), row(&[0., 1.]));
    let e0 = energy(&q0, &p0);
    assert_eq!(e0, 1.0);
    let (q, p) = leapfrog_step(&q0, &p0, &harmonic_grad, 0.01, 1000).unwrap();
    let drift = (energy(&q, &p) - e0).abs();
    assert!(drift < 1e-6, "energy drift {drift}");
    // And the orbit is where the exact solution says (q = [cos t, sin t]) to O(dt^2).
    let qv = q.to_vec2::<f64>().unwrap()[0].clone();
    assert!(
        (qv[0] - 10f64.cos()).abs() < 1e-3 && (qv[1] - 10f64.sin()).abs() < 1e-3,
        "{qv:?}"
    );
    // Same in f32, to f32 precision.
    let (q32, p32) = (
        q0.to_dtype(DType::F32).unwrap(),
        p0.to_dtype(DType::F32).unwrap(),
    );
    let (q, p) = leapfrog_step(&q32, &p32, &harmonic_grad, 0.01, 1000).unwrap();
    let e = hamiltonian_energy(&q, &p, harmonic, &Mass::Identity)
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()[0];
    assert!((e - 1.0).abs() < 1e-4, "{e}");
}

/// The 2n x 2n Jacobian of one integrator step from (q, p), by autograd (one backward per
/// output component).
fn jacobian(step: &dyn Fn(&Tensor, &Tensor) -> (Tensor, Tensor), q: &[f64], p: &[f64]) -> Vec<f64> {
    let n = q.len();
    let x = Tensor::from_vec([q, p].concat(), (1, 2 * n), &CPU)
        .unwrap()
        .variable();
    let (qo, po) = step(&x.narrow(1, 0, n).unwrap(), &x.narrow(1, n, n).unwrap());
    let out = Tensor::cat(&[&qo, &po], 1).unwrap();
    let mut j = Vec::with_capacity(4 * n * n);
    for i in 0..2 * n {
        let g = out
            .narrow(1, i, 1)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        j.extend(g.get(&x).unwrap().to_vec2::<f64>().unwrap()[0].clone());
    }
    j
}

fn det(mut a: Vec<f64>, n: usize) -> f64 {
    let mut d = 1.0;
    for c in 0..n {
        let piv = (c..n)
            .max_by(|&x, &y| a[x * n + c].abs().total_cmp(&a[y * n + c].abs()))
            .unwrap();
        if piv != c {
            for k in 0..n {
                a.swap(c * n + k, piv * n + k);
            }
            d = -d;
        }
        d *= a[c * n + c];
        for r in c + 1..n {
            let f = a[r * n + c] / a[c * n + c];
            for k in c..n {
                a[r * n + k] -= f * a[c * n + k];
            }
        }
    }
    d
}

#[test]
fn one_step_of_each_integrator_preserves_phase_space_volume() {
    let (q, p) = ([0.7, -1.2, 0.3], [0.4, 0.9, -0.5]);
    let grad_q = |q: &Tensor, _: &Tensor| anharmonic_grad(q);
    let grad_p = |_: &Tensor, p: &Tensor| Ok(p.clone());
    type Step = Box<dyn Fn(&Tensor, &Tensor) -> (Tensor, Tensor)>;
    let steps: Vec<(&str, Step)> = vec![
        (
            "symplectic euler",
            Box::new(move |q: &Tensor, p: &Tensor| {
                symplectic_euler_step(q, p, &grad_q, &grad_p, 0.1).unwrap()
            }),
        ),
        (
            "leapfrog",
            Box::new(|q: &Tensor, p: &Tensor| {
                leapfrog_step(q, p, &anharmonic_grad, 0.1, 3).unwrap()
            }),
        ),
        (
            "yoshida",
            Box::new(|q: &Tensor, p: &Tensor| {
                yoshida4_step(q, p, &anharmonic_grad, &Mass::Identity, 0.1, 2).unwrap()
            }),
        ),
    ];
    for (name, step) in &steps {
        let j = jacobian(step.as_ref(), &q, &p);
        let d = det(j, 6);
        assert!((d - 1.0).abs() < 1e-10, "{name}: det {d}");
    }
    // A non-symplectic integrator (explicit Euler) fails the same check: the test can fail.
    let euler = |q: &Tensor, p: &Tensor| {
        let f = anharmonic_grad(q).unwrap();
        (
            q.add(&p.affine(0.1, 0.0).unwrap()).unwrap(),
            p.sub(&f.affine(0.1, 0.0).unwrap()).unwrap(),
        )
    };
    let d = det(jacobian(&euler, &q, &p), 6);
    assert!((d - 1.0).abs() > 1e-3, "explicit euler det {d}");
}

#[test]
fn yoshida_error_falls_as_dt_to_the_fourth() {
    // Harmonic oscillator to T = 2: exact q = cos t, p = -sin t from (1, 0).
    let err = |n: usize| {
        let dt = 2.0 / n as f64;
        let (q, p) = yoshida4_step(
            &row(&[1.0]),
            &row(&[0.0]),
            &harmonic_grad,
            &Mass::Identity,
            dt,
            n,
        )
        .unwrap();
        let (q, p) = (
            q.to_vec2::<f64>().unwrap()[0][0],
            p.to_vec2::<f64>().unwrap()[0][0],
        );
        ((q - 2f64.cos()).powi(2) + (p + 2f64.sin()).powi(2)).sqrt()
    };
    let (e1, e2, e3) = (err(20), err(40), err(80));
    for (a, b) in [(e1, e2), (e2, e3)] {
        let order = (a / b).log2();
        assert!(
            (3.8..4.2).contains(&order),
            "observed order {order} ({a} -> {b})"
        );
    }
    // Leapfrog, for contrast, is second order.
    let lf = |n: usize| {
        let (q, _) = leapfrog_step(
            &row(&[1.0]),
            &row(&[0.0]),
            &harmonic_grad,
            2.0 / n as f64,
            n,
        )
        .unwrap();
        (q.to_vec2::<f64>().unwrap()[0][0] - 2f64.cos()).abs()
    };
    let order = (lf(40) / lf(80)).log2();
    assert!((1.8..2.2).contains(&order), "leapfrog order {order}");
}

#[test]
fn integrating_forward_then_back_with_flipped_momentum_returns_to_the_start() {
    let q0 = Tensor::from_vec(vec![0.5, -0.3, 1.1, 0.2, 0.9, -1.4], (2, 3), &CPU).unwrap();
    let p0 = Tensor::from_vec(vec![0.1, 0.8, -0.6, -0.2, 0.3, 0.7], (2, 3), &CPU).unwrap();
    type Step = dyn Fn(&Tensor, &Tensor) -> Result<(Tensor, Tensor)>;
    let lf = |q: &Tensor, p: &Tensor| leapfrog_step(q, p, &anharmonic_grad, 0.05, 200);
    let yo =
        |q: &Tensor, p: &Tensor| yoshida4_step(q, p, &anharmonic_grad, &Mass::Identity, 0.05, 200);
    for (name, f) in [("leapfrog", &lf as &Step), ("yoshida", &yo as &Step)] {
        let (q1, p1) = f(&q0, &p0).unwrap();
        let (q2, p2) = f(&q1, &p1.neg().unwrap()).unwrap();
        let dq = q2
            .sub(&q0)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f64>()
            .unwrap();
        let dp = p2
            .neg()
            .unwrap()
            .sub(&p0)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f64>()
            .unwrap();
        assert!(dq < 1e-10 && dp < 1e-10, "{name}: {dq} {dp}");
    }
}

#[test]
fn mass_matrices_define_the_kinetic_energy() {
    let p = row(&[1.0, 2.0]);
    let diag = Mass::diagonal(&Tensor::new([2.0f64, 4.0], &CPU).unwrap()).unwrap();
    // 0.5 (1/2 + 4/4) = 0.75
    assert!((diag.kinetic(&p).unwrap().to_vec1::<f64>().unwrap()[0] - 0.75).abs() < 1e-15);
    let m = Tensor::new([[2.0f64, 1.0], [1.0, 2.0]], &CPU).unwrap();
    let dense = Mass::dense(&m).unwrap();
    // M^-1 = [[2, -1], [-1, 2]] / 3; p^T M^-1 p = (2 - 4 + 8) / 3 = 2, kinetic 1.
    assert!((dense.kinetic(&p).unwrap().to_vec1::<f64>().unwrap()[0] - 1.0).abs() < 1e-14);
    assert!(Mass::dense(&Tensor::new([[1.0f64, 2.0], [2.0, 1.0]], &CPU).unwrap()).is_err());
    assert!(Mass::diagonal(&Tensor::new([1.0f64, 0.0], &CPU).unwrap()).is_err());
}

#[test]
fn hmc_recovers_the_mean_and_covariance_of_a_correlated_gaussian() {
    let d = 10;
    // Sigma = 0.5 I + 0.5 * 1 1^T scaled per dim: correlation 0.5 between all pairs, variances
    // (1 + i / 10)^2; mean i / 5 - 1.
    let sd: Vec<f64> = (0..d).map(|i| 1.0 + i as f64 / 10.0).collect();
    let mu: Vec<f64> = (0..d).map(|i| i as f64 / 5.0 - 1.0).collect();
    let mut sigma = vec![0.0; d * d];
    for i in 0..d {
        for j in 0..d {
            sigma[i * d + j] = sd[i] * sd[j] * if i == j { 1.0 } else { 0.5 };
        }
    }
    let prec = precision(&sigma, d);
    let prec_t = Tensor::from_vec(prec, (d, d), &CPU).unwrap();
    let mu_t = Tensor::from_vec(mu.clone(), (1, d), &CPU).unwrap();
    let potential = |q: &Tensor| -> Result<Tensor> {
        let x = q.sub(&mu_t)?;
        x.matmul(&prec_t)?.mul(&x)?.sum(1)?.affine(0.5, 0.0)
    };
    let chains = 100;
    let hmc = Hmc::new(potential, 0.25, 12).unwrap();
    let q0 = Tensor::zeros((chains, d), DType::F64, &CPU).unwrap();
    let out = hmc.sample(&q0, 200, 50, 1).unwrap();
    eprintln!("gaussian: acceptance {:.3}", out.acceptance_rate);
    assert!(
        out.acceptance_rate > 0.6,
        "acceptance {}",
        out.acceptance_rate
    );
    let s = out
        .samples
        .reshape((200 * chains, d))
        .unwrap()
        .to_vec2::<f64>()
        .unwrap();
    let n = s.len() as f64;
    for i in 0..d {
        let m = s.iter().map(|r| r[i]).sum::<f64>() / n;
        // 20k draws, autocorrelated: allow ~6 standard errors of an effective 2k sample.
        assert!(
            (m - mu[i]).abs() < 6.0 * sd[i] / 2000f64.sqrt(),
            "mean {i}: {m} vs {}",
            mu[i]
        );
    }
    for i in 0..d {
        for j in 0..=i {
            let mi = mu[i];
            let mj = mu[j];
            let c = s.iter().map(|r| (r[i] - mi) * (r[j] - mj)).sum::<f64>() / n;
            let want = sigma[i * d + j];
            assert!(
                (c - want).abs() < 0.12 * sd[i] * sd[j],
                "cov {i},{j}: {c} vs {want}"
            );
        }
    }
}

fn precision(sigma: &[f64], d: usize) -> Vec<f64> {
    // Gauss-Jordan inverse for the test's own reference.
    let mut a = sigma.to_vec();
    let mut inv: Vec<f64> = (0..d * d).map(|k| (k / d == k % d) as u8 as f64).collect();
    for c in 0..d {
        let p = a[c * d + c];
        for k in 0..d {
            a[c * d + k] /= p;
            inv[c * d + k] /= p;
        }
        for r in 0..d {
            if r != c {
                let f = a[r * d + c];
                for k in 0..d {
                    a[r * d + k] -= f * a[c * d + k];
                    inv[r * d + k] -= f * inv[c * d + k];
                }
            }
        }
    }
    inv
}

#[test]
fn hmc_samples_a_banana_and_reports_acceptance() {
    // x1 ~ N(0, 2^2), x2 | x1 ~ N(b (x1^2 - 4), 1) with b = 0.2: E[x2] = 0, Var[x1] = 4.
    let b = 0.2;
    let potential = |q: &Tensor| -> Result<Tensor> {
        let x1 = q.narrow(1, 0, 1)?;
        let x2 = q.narrow(1, 1, 1)?;
        let bend = x2.sub(&x1.sqr()?.affine(b, -4.0 * b)?)?;
        x1.sqr()?
            .affine(0.125, 0.0)?
            .add(&bend.sqr()?.affine(0.5, 0.0)?)?
            .sum(1)
    };
    let hmc = Hmc::new(potential, 0.2, 15).unwrap();
    let q0 = Tensor::zeros((100, 2), DType::F64, &CPU).unwrap();
    let out = hmc.sample(&q0, 200, 50, 2).unwrap();
    eprintln!("banana: acceptance {:.3}", out.acceptance_rate);
    assert!(
        out.acceptance_rate > 0.5 && out.acceptance_rate < 1.0,
        "{}",
        out.acceptance_rate
    );
    let s = out
        .samples
        .reshape((20_000, 2))
        .unwrap()
        .to_vec2::<f64>()
        .unwrap();
    let n = s.len() as f64;
    let m1 = s.iter().map(|r| r[0]).sum::<f64>() / n;
    let m2 = s.iter().map(|r| r[1]).sum::<f64>() / n;
    let v1 = s.iter().map(|r| (r[0] - m1).powi(2)).sum::<f64>() / n;
    assert!(m1.abs() < 0.2 && m2.abs() < 0.2, "means {m1} {m2}");
    assert!((v1 - 4.0).abs() < 0.6, "var x1 {v1}");
}

#[test]
fn autograd_forces_match_the_analytic_gradient_and_energy_stays_bounded() {
    let q = Tensor::from_vec(vec![0.3, -1.7, 2.2, 0.0], (2, 2), &CPU).unwrap();
    let auto = grad_potential(&anharmonic, &q)
        .unwrap()
        .to_vec2::<f64>()
        .unwrap();
    let exact = anharmonic_grad(&q).unwrap().to_vec2::<f64>().unwrap();
    for (a, e) in auto.iter().flatten().zip(exact.iter().flatten()) {
        assert!((a - e).abs() < 1e-12, "{a} vs {e}");
    }
    let p = Tensor::from_vec(vec![0.5, 0.1, -0.4, 1.0], (2, 2), &CPU).unwrap();
    let e0 = hamiltonian_energy(&q, &p, anharmonic, &Mass::Identity)
        .unwrap()
        .to_vec1::<f64>()
        .unwrap();
    let (q1, p1) = leapfrog_step(&q, &p, &anharmonic_grad, 0.01, 1000).unwrap();
    let e1 = hamiltonian_energy(&q1, &p1, anharmonic, &Mass::Identity)
        .unwrap()
        .to_vec1::<f64>()
        .unwrap();
    for (a, b) in e0.iter().zip(&e1) {
        assert!((a - b).abs() < 1e-3 * a.abs(), "{a} -> {b}");
    }
}
