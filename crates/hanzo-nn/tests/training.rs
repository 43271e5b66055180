//! VarMap / VarBuilder, optimizers against hand-computed PyTorch update rules, and a real
//! training run on scikit-learn's digits (fetched by scripts/fixtures.py).

use hanzo_ml::{DType, Device, Tensor};
use hanzo_nn::optim::AdamWConfig;
use hanzo_nn::*;
use std::collections::HashMap;

#[path = "../../../scripts/fixture_path.rs"]
mod fixture_path;

const CPU: Device = Device::Cpu;

/// Runs three steps on f(w) = w^2 / 2 (gradient w) from w = 1.
fn three_steps(opt: &mut dyn Optimizer, var: &Var) -> Vec<f64> {
    (0..3)
        .map(|_| {
            let w = var.get();
            let loss = w
                .sqr()
                .unwrap()
                .affine(0.5, 0.0)
                .unwrap()
                .sum_all()
                .unwrap();
            opt.backward_step(&loss).unwrap();
            var.get().to_vec1::<f64>().unwrap()[0]
        })
        .collect()
}

#[test]
fn sgd_with_momentum_follows_the_pytorch_rule() {
    let var = Var::new(&Tensor::new([1f64], &CPU).unwrap());
    let mut sgd = Sgd::new(vec![var.clone()], 0.1).with_momentum(0.9, false);
    // b1 = 1, w = 0.9; b2 = 0.9 + 0.9 = 1.8, w = 0.72; b3 = 1.62 + 0.72 = 2.34, w = 0.486.
    let got = three_steps(&mut sgd, &var);
    for (g, w) in got.iter().zip([0.9, 0.72, 0.486]) {
        assert!((g - w).abs() < 1e-12, "{got:?}");
    }
}

#[test]
fn adamw_follows_the_pytorch_rule() {
    let var = Var::new(&Tensor::new([1f64], &CPU).unwrap());
    let cfg = AdamWConfig {
        lr: 0.1,
        ..Default::default()
    };
    let mut adam = AdamW::new(vec![var.clone()], cfg);
    // torch.optim.AdamW(lr=0.1) on w^2/2 from 1.0 (values computed with its formulas).
    let got = three_steps(&mut adam, &var);
    for (g, w) in got
        .iter()
        .zip([0.899000001, 0.7985190281887788, 0.6989111847156934])
    {
        assert!((g - w).abs() < 1e-12, "{got:?}");
    }
}

#[test]
fn var_builder_prefixes_shapes_and_errors_name_the_tensor() {
    let map = VarMap::new();
    let vb = VarBuilder::from_varmap(&map, DType::F32, &CPU);
    let l1 = Linear::load(3, 4, true, &vb.pp("encoder").pp(0)).unwrap();
    let _l2 = Linear::load(4, 2, false, &vb.pp("head")).unwrap();
    let names: Vec<String> = map.vars().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        vec!["encoder.0.bias", "encoder.0.weight", "head.weight"]
    );
    // Asking again returns the same variable; a different shape is refused.
    let again = Linear::load(3, 4, true, &vb.pp("encoder").pp(0)).unwrap();
    assert_eq!(again.weight().id(), l1.weight().id());
    assert!(Linear::load(5, 4, true, &vb.pp("encoder").pp(0)).is_err());

    // Save, reload into a file-backed builder, and load a layer from it.
    let dir = std::env::temp_dir().join(format!("hanzo-nn-vb-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("vars.safetensors");
    map.save(&path).unwrap();
    let file_vb = VarBuilder::from_safetensors(&[&path], DType::F32, &CPU).unwrap();
    let loaded = Linear::load(3, 4, true, &file_vb.pp("encoder.0")).unwrap();
    assert_eq!(
        loaded.weight().to_vec2::<f32>().unwrap(),
        l1.weight().to_vec2::<f32>().unwrap()
    );
    let err = Linear::load(3, 5, true, &file_vb.pp("encoder.0"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("encoder.0.weight") && err.contains("[5, 3]"),
        "{err}"
    );
    let err = Linear::load(3, 4, true, &file_vb.pp("decoder"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("decoder.weight"), "{err}");

    // VarMap::load restores saved values.
    let w0 = l1.weight().to_vec2::<f32>().unwrap();
    map.get("encoder.0.weight")
        .unwrap()
        .set(&Tensor::zeros((4, 3), DType::F32, &CPU).unwrap())
        .unwrap();
    map.load(&path).unwrap();
    assert_eq!(l1.weight().to_vec2::<f32>().unwrap(), w0);
    std::fs::remove_dir_all(&dir).ok();

    let empty: HashMap<String, Tensor> = HashMap::new();
    let vb = VarBuilder::from_tensors(empty, DType::F32, &CPU);
    assert!(Embedding::load(10, 4, &vb).is_err());
}

/// scikit-learn's digits, fetched and verified by scripts/fixtures.py on first use.
fn digits() -> (Tensor, Tensor) {
    let arrays: HashMap<String, Tensor> =
        hanzo_ml::io::npy::read_npz(fixture_path::fixture("digits"))
            .unwrap()
            .into_iter()
            .collect();
    (arrays["x"].clone(), arrays["y"].clone())
}

#[test]
fn an_mlp_on_the_digits_learns() {
    let (x, y) = digits();
    assert_eq!(x.dims(), &[1797, 64]);
    let x = x
        .affine(1.0 / 16.0, 0.0)
        .unwrap()
        .narrow(0, 0, 512)
        .unwrap();
    let y = y.narrow(0, 0, 512).unwrap();
    hanzo_ml::manual_seed(7);
    let map = VarMap::new();
    let vb = VarBuilder::from_varmap(&map, DType::F32, &CPU);
    let l1 = Linear::load(64, 32, true, &vb.pp("l1")).unwrap();
    let l2 = Linear::load(32, 10, true, &vb.pp("l2")).unwrap();
    let mut opt = AdamW::new(
        map.all_vars(),
        AdamWConfig {
            lr: 1e-2,
            weight_decay: 0.0,
            ..Default::default()
        },
    );
    let loss_of = || {
        let h = l1.forward(&x).unwrap().relu().unwrap();
        loss::cross_entropy(&l2.forward(&h).unwrap(), &y).unwrap()
    };
    let first = loss_of().to_scalar::<f32>().unwrap();
    for _ in 0..30 {
        opt.backward_step(&loss_of()).unwrap();
    }
    let last = loss_of().to_scalar::<f32>().unwrap();
    assert!(first > 2.0, "untrained loss {first} should be near ln 10");
    assert!(last < 0.5 * first, "loss went from {first} to {last}");
}
