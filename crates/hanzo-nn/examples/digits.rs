//! Trains an MLP and a small CNN on scikit-learn's 8x8 handwritten digits and reports the
//! loss curve and held-out accuracy.
//!
//! ```sh
//! python3 scripts/fixtures.py digits          # exports digits.npz once
//! cargo run --release -p hanzo-nn --example digits [-- mlp|cnn|cnn-avgpool] [--save DIR]
//! ```
//!
//! The split is fixed (a seeded shuffle; 1437 train / 360 test images), so runs are comparable.

use hanzo_ml::{DType, Device, Result, Tensor};
use hanzo_nn::conv::ConvConfig;
use hanzo_nn::optim::AdamWConfig;
use hanzo_nn::*;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::collections::HashMap;

const CPU: Device = Device::Cpu;
const TEST: usize = 360;
const BATCH: usize = 64;

pub struct Data {
    pub train_x: Tensor,
    pub train_y: Tensor,
    pub test_x: Tensor,
    pub test_y: Tensor,
}

fn fixtures_path() -> std::path::PathBuf {
    let dir = std::env::var_os("HANZO_FIXTURES")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            let base = std::env::var_os("XDG_CACHE_HOME")
                .map(std::path::PathBuf::from)
                .unwrap_or_else(|| {
                    std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                        .join(".cache")
                });
            base.join("hanzo-ml/fixtures")
        });
    dir.join("digits.npz")
}

fn load() -> Result<Data> {
    let path = fixtures_path();
    let arrays: HashMap<String, Tensor> = hanzo_ml::io::npy::read_npz(&path)
        .map_err(|e| hanzo_ml::Error::Custom {
            op: "digits".into(),
            msg: format!("{e} (run `python3 scripts/fixtures.py digits` first)"),
        })?
        .into_iter()
        .collect();
    let (x, y) = (&arrays["x"], &arrays["y"]);
    let n = x.dims()[0];
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(0));
    let idx = |r: &[u32]| Tensor::from_vec(r.to_vec(), r.len(), &CPU);
    let (test, train) = order.split_at(TEST);
    let x = x.affine(1.0 / 16.0, 0.0)?; // pixel values 0..16 -> 0..1
    Ok(Data {
        train_x: x.index_select(&idx(train)?, 0)?,
        train_y: y.index_select(&idx(train)?, 0)?,
        test_x: x.index_select(&idx(test)?, 0)?,
        test_y: y.index_select(&idx(test)?, 0)?,
    })
}

fn mlp(vb: &VarBuilder) -> Result<Sequential> {
    Ok(Sequential::new()
        .add(Linear::load(64, 128, true, &vb.pp("fc1"))?)
        .add(Activation::Relu)
        .add(Dropout::new(0.1)?)
        .add(Linear::load(128, 10, true, &vb.pp("fc2"))?))
}

fn cnn(vb: &VarBuilder) -> Result<Sequential> {
    cnn_with(vb, false)
}

/// The FHE-friendly architecture: average pooling from the start, so converting it only
/// approximates the activations.
fn cnn_avgpool(vb: &VarBuilder) -> Result<Sequential> {
    cnn_with(vb, true)
}

fn pool(avg: bool) -> Box<dyn Layer> {
    if avg {
        Box::new(AvgPool2d(2))
    } else {
        Box::new(MaxPool2d(2))
    }
}

fn cnn_with(vb: &VarBuilder, avg: bool) -> Result<Sequential> {
    let same = ConvConfig {
        padding: 1,
        ..Default::default()
    };
    Ok(Sequential::new()
        .add(|x: &Tensor| x.reshape((x.dims()[0], 1, 8, 8)))
        .add(Conv2d::load(1, 16, 3, same, true, &vb.pp("conv1"))?)
        .add(Activation::Relu)
        .add_boxed(pool(avg)) // 16 x 4 x 4
        .add(Conv2d::load(16, 32, 3, same, true, &vb.pp("conv2"))?)
        .add(Activation::Relu)
        .add_boxed(pool(avg)) // 32 x 2 x 2
        .add(|x: &Tensor| x.flatten(1, 3))
        .add(Linear::load(128, 10, true, &vb.pp("fc"))?))
}

fn accuracy(model: &Sequential, x: &Tensor, y: &Tensor) -> Result<f64> {
    let pred = model.forward_t(x, false)?.argmax(1)?.to_dtype(DType::I64)?;
    let right = pred
        .eq(y)?
        .to_dtype(DType::F32)?
        .sum_all()?
        .to_scalar::<f32>()?;
    Ok(right as f64 / y.dims()[0] as f64)
}

fn train(
    name: &str,
    build: fn(&VarBuilder) -> Result<Sequential>,
    data: &Data,
    epochs: usize,
) -> Result<(Sequential, VarMap, f64)> {
    hanzo_ml::manual_seed(42);
    let map = VarMap::new();
    let model = build(&VarBuilder::from_varmap(&map, DType::F32, &CPU))?;
    let mut opt = AdamW::new(
        map.all_vars(),
        AdamWConfig {
            lr: 3e-3,
            weight_decay: 1e-4,
            ..Default::default()
        },
    );
    let n = data.train_x.dims()[0];
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let mut order: Vec<u32> = (0..n as u32).collect();
    let start = std::time::Instant::now();
    println!("{name}: epoch  train-loss  test-acc");
    for epoch in 1..=epochs {
        order.shuffle(&mut rng);
        let (mut total, mut batches) = (0.0, 0);
        for chunk in order.chunks(BATCH) {
            let ids = Tensor::from_vec(chunk.to_vec(), chunk.len(), &CPU)?;
            let x = data.train_x.index_select(&ids, 0)?;
            let y = data.train_y.index_select(&ids, 0)?;
            let loss = loss::cross_entropy(&model.forward_t(&x, true)?, &y)?;
            total += loss.to_scalar::<f32>()? as f64;
            batches += 1;
            opt.backward_step(&loss)?;
        }
        if epoch == 1 || epoch % 5 == 0 || epoch == epochs {
            let acc = accuracy(&model, &data.test_x, &data.test_y)?;
            println!(
                "{name}: {epoch:5}  {:10.4}  {:7.2}%",
                total / batches as f64,
                acc * 100.0
            );
        }
    }
    let acc = accuracy(&model, &data.test_x, &data.test_y)?;
    println!(
        "{name}: test accuracy {:.2}% after {epochs} epochs ({:.1} s)",
        acc * 100.0,
        start.elapsed().as_secs_f64()
    );
    Ok((model, map, acc))
}

/// The same trained weights with every activation replaced by a Chebyshev fit (calibrated on
/// training images) and max pooling by average pooling: what an FHE deployment would run.
fn polynomial_accuracy(name: &str, model: &Sequential, data: &Data, exact: f64) -> Result<()> {
    let calib = data.train_x.narrow(0, 0, 512)?;
    for degree in [7, 15, 31] {
        let cfg = poly::PolyConfig {
            degree,
            ..Default::default()
        };
        let (converted, subs) = poly::to_polynomial(model, &calib, &cfg)?;
        let acc = accuracy(&converted, &data.test_x, &data.test_y)?;
        if degree == 7 {
            for s in &subs {
                println!(
                    "{name}: layer {}: {} on [{:.2}, {:.2}]",
                    s.layer, s.what, s.interval.0, s.interval.1
                );
            }
        }
        println!(
            "{name}: polynomial (degree {degree:2}) test accuracy {:.2}% (exact {:.2}%, drop {:.2} points)",
            acc * 100.0,
            exact * 100.0,
            (exact - acc) * 100.0
        );
    }
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let save = args
        .iter()
        .position(|a| a == "--save")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let which = args
        .iter()
        .find(|a| ["mlp", "cnn", "cnn-avgpool"].contains(&a.as_str()))
        .cloned();
    let data = load()?;
    type Build = fn(&VarBuilder) -> Result<Sequential>;
    let models: [(&str, Build, usize); 3] = [
        ("mlp", mlp, 40),
        ("cnn", cnn, 25),
        ("cnn-avgpool", cnn_avgpool, 60),
    ];
    for (name, build, epochs) in models {
        if which.as_deref().is_some_and(|w| w != name) {
            continue;
        }
        let (model, map, acc) = train(name, build, &data, epochs)?;
        polynomial_accuracy(name, &model, &data, acc)?;
        if let Some(dir) = &save {
            std::fs::create_dir_all(dir)?;
            map.save(std::path::Path::new(dir).join(format!("digits-{name}.safetensors")))?;
        }
        if acc < 0.95 {
            eprintln!("{name}: accuracy below 95%");
            std::process::exit(1);
        }
    }
    Ok(())
}
