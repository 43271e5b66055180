//! `hanzo-engine quantize` end to end on the real fixtures.

mod common;

use common::{engine, fixture};
use hanzo_ml::quantized::gguf::{GgufFile, Value};
use hanzo_ml::quantized::GgmlDType;
use std::path::{Path, PathBuf};

fn tmp(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// llama.cpp made the Gemma fixture with its Q4_K_M mixture; our planner, given the same
/// tensor list, must pick the same type for every tensor (Q6_K on the more-bits attention V
/// and FFN down layers, Q5_0 where 640-wide rows rule out Q4_K, Q8_0 for the tied embedding).
#[test]
fn q4_k_m_plan_reproduces_llama_cpp_on_gemma3() {
    let path = fixture("gemma3");
    let file = GgufFile::open(&path).unwrap();
    let plan = hanzo_engine::quantize::plan_for(&path, "Q4_K_M").unwrap();
    let mut differ = Vec::new();
    for ((name, ours), info) in plan.iter().zip(file.tensor_infos()) {
        assert_eq!(name, &info.name);
        if *ours != info.dtype {
            differ.push(format!("{name}: ours {ours}, llama.cpp {}", info.dtype));
        }
    }
    assert!(
        differ.is_empty(),
        "{} tensors differ:\n{}",
        differ.len(),
        differ.join("\n")
    );
}

#[test]
fn requantizes_gemma3_to_q8_0_keeping_metadata() {
    let src = fixture("gemma3");
    let out = tmp("gemma3-q8_0.gguf");
    let r = engine(&[
        "quantize",
        src.to_str().unwrap(),
        out.to_str().unwrap(),
        "--type",
        "Q8_0",
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let a = GgufFile::open(&src).unwrap();
    let b = GgufFile::open(&out).unwrap();
    for (k, v) in a.metadata() {
        if k != "general.file_type" {
            assert_eq!(b.get(k), Some(v), "{k}");
        }
    }
    assert_eq!(b.get("general.file_type"), Some(&Value::U32(7)));
    assert_eq!(a.tensor_infos().len(), b.tensor_infos().len());
    for (ta, tb) in a.tensor_infos().iter().zip(b.tensor_infos()) {
        assert_eq!(ta.name, tb.name);
        assert_eq!(ta.shape, tb.shape);
        let want = if ta.shape.rank() >= 2 {
            GgmlDType::Q8_0
        } else {
            GgmlDType::F32
        };
        assert_eq!(tb.dtype, want, "{}", ta.name);
    }
    // Q8_0 of the dequantized Q4_K/Q5_0/Q6_K values is within Q8_0's own error of them.
    let x = a
        .tensor("blk.3.ffn_down.weight")
        .unwrap()
        .dequantize_f32()
        .unwrap();
    let y = b
        .tensor("blk.3.ffn_down.weight")
        .unwrap()
        .dequantize_f32()
        .unwrap();
    let rms =
        |v: &[f32]| (v.iter().map(|a| (*a as f64).powi(2)).sum::<f64>() / v.len() as f64).sqrt();
    let diff: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a - b).collect();
    assert!(rms(&diff) < 0.01 * rms(&x), "{} vs {}", rms(&diff), rms(&x));
    std::fs::remove_file(out).ok();
}

#[test]
fn quantizes_safetensors_directory() {
    let dir = fixture("minilm");
    let out = tmp("minilm-q4_k_m.gguf");
    let r = engine(&[
        "quantize",
        dir.to_str().unwrap(),
        out.to_str().unwrap(),
        "--type",
        "q4_k_m",
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let f = GgufFile::open(&out).unwrap();
    assert_eq!(
        f.get("general.architecture").and_then(|v| v.as_str()),
        Some("bert")
    );
    let ty = |n: &str| {
        f.tensor_infos()
            .iter()
            .find(|t| t.name.ends_with(n))
            .unwrap()
            .dtype
    };
    // 384-wide rows cannot hold 256-blocks: Q4_K falls back to Q5_0; 1536-wide rows take Q4_K.
    assert_eq!(
        ty("encoder.layer.0.attention.self.query.weight"),
        GgmlDType::Q5_0
    );
    assert_eq!(ty("encoder.layer.0.output.dense.weight"), GgmlDType::Q4K);
    assert_eq!(
        ty("encoder.layer.0.attention.self.query.bias"),
        GgmlDType::F32
    );
    assert_eq!(ty("embeddings.LayerNorm.weight"), GgmlDType::F32);
    assert_eq!(ty("embeddings.position_embeddings.weight"), GgmlDType::F32);
    std::fs::remove_file(out).ok();
}

#[test]
fn bad_invocations_fail_cleanly() {
    let out = tmp("never.gguf");
    let r = engine(&[
        "quantize",
        "/nonexistent.gguf",
        out.to_str().unwrap(),
        "--type",
        "Q4_0",
    ]);
    assert!(!r.status.success());
    assert!(String::from_utf8_lossy(&r.stderr).contains("/nonexistent.gguf"));

    let src = fixture("gemma3");
    let r = engine(&[
        "quantize",
        src.to_str().unwrap(),
        out.to_str().unwrap(),
        "--type",
        "Q9_X",
    ]);
    assert!(!r.status.success());
    assert!(String::from_utf8_lossy(&r.stderr).contains("unknown quantization type"));

    // A truncated model is rejected before anything is written.
    let bad = tmp("truncated.gguf");
    let bytes = std::fs::read(&src).unwrap();
    std::fs::write(&bad, &bytes[..bytes.len() / 2]).unwrap();
    let r = engine(&[
        "quantize",
        bad.to_str().unwrap(),
        out.to_str().unwrap(),
        "--type",
        "Q4_0",
    ]);
    assert!(!r.status.success());
    assert!(
        String::from_utf8_lossy(&r.stderr).contains("beyond the end"),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert!(!out.exists());
    std::fs::remove_file(bad).ok();
}

/// An importance matrix for every weight llama-imatrix would see in the Gemma fixture (all
/// but the token embedding), with values exact in f32 after llama.cpp's normalisation, written
/// in both of llama-imatrix's forms: GGUF (`in_sum2` = 8 · value, `counts` = 8) and legacy .dat
/// (stored value = 4 · value, `ncall` = 4).
fn write_imatrix_both_ways(model: &Path, gguf: &Path, dat: &Path) {
    use hanzo_ml::quantized::gguf::{write_gguf, Array, TensorSpec};
    let file = GgufFile::open(model).unwrap();
    let weights: Vec<(String, usize)> = file
        .tensor_infos()
        .iter()
        .filter(|t| t.shape.rank() == 2 && t.name != "token_embd.weight")
        .map(|t| (t.name.clone(), *t.shape.dims().last().unwrap()))
        .collect();
    // Heavy-tailed positive values, a few of them zero.
    let values = |seed: usize, cols: usize| -> Vec<f32> {
        (0..cols)
            .map(|j| {
                let h = (j * 2_654_435_761 + seed * 40_503) % 1_000;
                if h < 7 {
                    0.0
                } else {
                    (h as f32 / 64.0).powi(3) / 64.0
                }
            })
            .collect()
    };
    let mut specs = Vec::new();
    let mut blobs: Vec<Vec<u8>> = Vec::new();
    let mut dat_bytes = (weights.len() as i32).to_le_bytes().to_vec();
    for (k, (name, cols)) in weights.iter().enumerate() {
        let v = values(k, *cols);
        let f32s = |xs: &[f32]| xs.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        specs.push(TensorSpec {
            name: format!("{name}.in_sum2"),
            dtype: GgmlDType::F32,
            shape: (1, *cols).into(),
        });
        blobs.push(f32s(&v.iter().map(|x| 8.0 * x).collect::<Vec<_>>()));
        specs.push(TensorSpec {
            name: format!("{name}.counts"),
            dtype: GgmlDType::F32,
            shape: (1, 1).into(),
        });
        blobs.push(f32s(&[8.0]));
        dat_bytes.extend((name.len() as i32).to_le_bytes());
        dat_bytes.extend(name.as_bytes());
        dat_bytes.extend(4i32.to_le_bytes());
        dat_bytes.extend((*cols as i32).to_le_bytes());
        dat_bytes.extend(f32s(&v.iter().map(|x| 4.0 * x).collect::<Vec<_>>()));
    }
    dat_bytes.extend(3i32.to_le_bytes());
    dat_bytes.extend((4i32).to_le_bytes());
    dat_bytes.extend(b"wiki");
    std::fs::write(dat, dat_bytes).unwrap();
    let metadata = vec![
        ("general.type".to_string(), Value::String("imatrix".into())),
        (
            "imatrix.datasets".to_string(),
            Value::Array(Array::String(vec!["wiki".into()])),
        ),
        ("imatrix.chunk_count".to_string(), Value::U32(3)),
        ("imatrix.chunk_size".to_string(), Value::U32(512)),
    ];
    let mut w = std::io::BufWriter::new(std::fs::File::create(gguf).unwrap());
    write_gguf(&mut w, &metadata, &specs, |i| {
        Ok(std::borrow::Cow::Owned(blobs[i].clone()))
    })
    .unwrap();
}

fn quantize_with(args: &[&str]) -> std::process::Output {
    let mut all = vec!["quantize"];
    all.extend_from_slice(args);
    engine(&all)
}

#[test]
fn importance_matrix_in_either_form_gives_the_same_weights_and_llama_cpps_choices() {
    let src = fixture("gemma3");
    let (im_gguf, im_dat) = (tmp("gemma3.imatrix.gguf"), tmp("gemma3.imatrix.dat"));
    write_imatrix_both_ways(&src, &im_gguf, &im_dat);
    let s = src.to_str().unwrap();
    let outs = [
        tmp("gemma3-q4_0-imatrix-gguf.gguf"),
        tmp("gemma3-q4_0-imatrix-dat.gguf"),
        tmp("gemma3-q4_0-plain.gguf"),
    ];
    for (out, im) in outs.iter().zip([Some(&im_gguf), Some(&im_dat), None]) {
        let mut args = vec![s, out.to_str().unwrap(), "--type", "Q4_0"];
        if let Some(im) = im {
            args.extend(["--imatrix", im.to_str().unwrap()]);
        }
        let r = quantize_with(&args);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    }
    let [a, b, plain] = outs.each_ref().map(|p| GgufFile::open(p).unwrap());
    for t in a.tensor_infos() {
        assert_eq!(
            a.tensor_bytes(&t.name).unwrap(),
            b.tensor_bytes(&t.name).unwrap(),
            "{}",
            t.name
        );
    }
    let weights = a
        .tensor_infos()
        .iter()
        .filter(|t| t.shape.rank() == 2 && t.name != "token_embd.weight")
        .count();
    assert_eq!(
        a.get("quantize.imatrix.entries_count"),
        Some(&Value::U32(weights as u32))
    );
    for f in [&a, &b] {
        assert_eq!(f.get("quantize.imatrix.chunks_count"), Some(&Value::U32(3)));
        assert_eq!(
            f.get("quantize.imatrix.dataset").and_then(|v| v.as_str()),
            Some("wiki")
        );
    }
    assert!(plain.get("quantize.imatrix.file").is_none());
    let ty = |f: &GgufFile, n: &str| f.content().tensor_info(n).unwrap().dtype;
    // llama.cpp guards the first eighth of the FFN-down layers (2 of Gemma's 18) with Q4_1
    // when an importance matrix is given, and only then.
    assert_eq!(ty(&a, "blk.1.ffn_down.weight"), GgmlDType::Q4_1);
    assert_eq!(ty(&a, "blk.2.ffn_down.weight"), GgmlDType::Q4_0);
    assert_eq!(ty(&plain, "blk.1.ffn_down.weight"), GgmlDType::Q4_0);
    // The importance changes the weights it covers, and only those.
    let same = |n: &str| a.tensor_bytes(n).unwrap() == plain.tensor_bytes(n).unwrap();
    assert!(!same("blk.5.attn_q.weight"));
    assert!(same("token_embd.weight"));
    for p in outs.iter().chain([&im_gguf, &im_dat]) {
        std::fs::remove_file(p).ok();
    }
}

#[test]
fn unusable_importance_matrices_fail_cleanly_and_write_nothing() {
    let src = fixture("gemma3");
    let s = src.to_str().unwrap();
    let out = tmp("never-imatrix.gguf");
    let dat = tmp("bad.imatrix.dat");
    std::fs::remove_file(&out).ok();
    let run = |bytes: &[u8]| {
        std::fs::write(&dat, bytes).unwrap();
        let r = quantize_with(&[
            s,
            out.to_str().unwrap(),
            "--type",
            "Q4_0",
            "--imatrix",
            dat.to_str().unwrap(),
        ]);
        assert!(!r.status.success());
        assert!(!out.exists() && !tmp("never-imatrix.gguf.partial").exists());
        String::from_utf8_lossy(&r.stderr).into_owned()
    };
    let entry = |name: &str, values: &[f32]| {
        let mut b = 1i32.to_le_bytes().to_vec();
        b.extend((name.len() as i32).to_le_bytes());
        b.extend(name.as_bytes());
        b.extend(1i32.to_le_bytes());
        b.extend((values.len() as i32).to_le_bytes());
        b.extend(values.iter().flat_map(|v| v.to_le_bytes()));
        b
    };
    // Cut short inside the values.
    let whole = entry("blk.0.attn_q.weight", &[1.0; 640]);
    let err = run(&whole[..100]);
    assert!(
        err.contains("entry 1 of 1") && err.contains("ends"),
        "{err}"
    );
    // A matrix made for another model.
    let err = run(&entry("blk.0.attn_q.weight", &[1.0; 100]));
    assert!(err.contains("another model"), "{err}");
    // Non-finite values.
    let mut v = vec![1.0f32; 640];
    v[3] = f32::NAN;
    let err = run(&entry("blk.0.attn_q.weight", &v));
    assert!(err.contains("non-finite"), "{err}");
    // Negative lengths and empty files.
    let err = run(&[1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
    assert!(err.contains("negative"), "{err}");
    let err = run(&[]);
    assert!(err.contains("not a usable importance matrix"), "{err}");
    // A model instead of an importance matrix.
    let r = quantize_with(&[s, out.to_str().unwrap(), "--type", "Q4_0", "--imatrix", s]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        !r.status.success() && err.contains("imatrix.datasets"),
        "{err}"
    );
    std::fs::remove_file(&dat).ok();
}

/// The type counts `llama-quantize` (llama.cpp 0c1e570) gave for Gemma 3 270M in the IQ3
/// mixtures (IQ3_XS with an importance matrix); the tensors it wrote equal ours byte for byte
/// (compared outside the test suite, which has no llama.cpp).
#[test]
fn iq3_mixture_plans_match_llama_quantize_on_gemma3() {
    let path = fixture("gemma3");
    let counts = |recipe: &str| {
        let mut c = std::collections::BTreeMap::new();
        for (_, t) in hanzo_engine::quantize::plan_for(&path, recipe).unwrap() {
            *c.entry(t.name()).or_insert(0) += 1;
        }
        c.into_iter().collect::<Vec<_>>()
    };
    assert_eq!(
        counts("IQ3_M"),
        [
            ("F32", 109),
            ("IQ3_S", 16),
            ("IQ4_NL", 72),
            ("Q4_K", 20),
            ("Q5_0", 18),
            ("Q8_0", 1)
        ]
    );
    assert_eq!(
        counts("IQ3_S"),
        [
            ("F32", 109),
            ("IQ3_S", 36),
            ("IQ4_NL", 72),
            ("Q5_0", 18),
            ("Q8_0", 1)
        ]
    );
}

/// A small llama model of F32 matrices `names`, each 8x256 (none of the fixtures has
/// 256-wide attention rows: theirs fall back to IQ4_NL), and the values it holds.
fn write_tiny_model(path: &std::path::Path, names: &[&str]) -> Vec<f32> {
    use hanzo_ml::quantized::gguf::{write_gguf, TensorSpec};
    let specs: Vec<TensorSpec> = names
        .iter()
        .map(|n| TensorSpec {
            name: n.to_string(),
            dtype: GgmlDType::F32,
            shape: (8, 256).into(),
        })
        .collect();
    let x: Vec<f32> = (0..8 * 256)
        .map(|i| ((i * 7919) % 255) as f32 / 255.0 - 0.5)
        .collect();
    let data: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let meta = vec![(
        "general.architecture".to_string(),
        Value::String("llama".into()),
    )];
    let mut w = std::fs::File::create(path).unwrap();
    write_gguf(&mut w, &meta, &specs, |_| {
        Ok(std::borrow::Cow::Borrowed(&data[..]))
    })
    .unwrap();
    x
}

/// An importance matrix (llama-imatrix's GGUF form) covering the 256-column tensors `names`.
fn write_tiny_imatrix(path: &std::path::Path, names: &[&str]) {
    use hanzo_ml::quantized::gguf::{write_gguf, Array, TensorSpec};
    let mut specs = Vec::new();
    let mut blobs = Vec::new();
    for n in names {
        specs.push(TensorSpec {
            name: format!("{n}.in_sum2"),
            dtype: GgmlDType::F32,
            shape: (1, 256).into(),
        });
        blobs.push(
            (0..256)
                .flat_map(|i| (1.0 + i as f32).to_le_bytes())
                .collect(),
        );
        specs.push(TensorSpec {
            name: format!("{n}.counts"),
            dtype: GgmlDType::F32,
            shape: (1, 1).into(),
        });
        blobs.push(2f32.to_le_bytes().to_vec());
    }
    let meta = vec![
        (
            "imatrix.datasets".to_string(),
            Value::Array(Array::String(vec!["t".into()])),
        ),
        ("imatrix.chunk_count".to_string(), Value::U32(1)),
        ("imatrix.chunk_size".to_string(), Value::U32(512)),
    ];
    let mut w = std::fs::File::create(path).unwrap();
    write_gguf(&mut w, &meta, &specs, |i| {
        Ok(std::borrow::Cow::Borrowed(&blobs[i][..]))
    })
    .unwrap();
}

fn rms(v: impl Iterator<Item = f32>) -> f64 {
    let v: Vec<f32> = v.collect();
    (v.iter().map(|a| (*a as f64).powi(2)).sum::<f64>() / v.len() as f64).sqrt()
}

/// IQ3_XS puts attention Q/K in IQ3_XXS, which needs an importance matrix.
#[test]
fn iq3_xxs_tensors_need_an_importance_matrix() {
    let model = tmp("tiny-256.gguf");
    let x = write_tiny_model(&model, &["blk.0.attn_q.weight", "blk.0.attn_v.weight"]);
    let out = tmp("tiny-256-iq3_xs.gguf");
    std::fs::remove_file(&out).ok();
    let (m, o) = (model.to_str().unwrap(), out.to_str().unwrap());
    let r = quantize_with(&[m, o, "--type", "IQ3_XS"]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success(), "{err}");
    assert!(
        err.contains("blk.0.attn_q.weight") && err.contains("--imatrix"),
        "{err}"
    );
    assert!(!out.exists());

    // With an importance matrix for it, attention Q is IQ3_XXS (V stays IQ3_S).
    let im = tmp("tiny-256.imatrix.gguf");
    write_tiny_imatrix(&im, &["blk.0.attn_q.weight"]);
    let r = quantize_with(&[m, o, "--type", "IQ3_XS", "--imatrix", im.to_str().unwrap()]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let f = GgufFile::open(&out).unwrap();
    let ty = |n: &str| f.content().tensor_info(n).unwrap().dtype;
    assert_eq!(ty("blk.0.attn_q.weight"), GgmlDType::IQ3XXS);
    assert_eq!(ty("blk.0.attn_v.weight"), GgmlDType::IQ3S);
    // IQ3_XXS round-trips the weights to within its 3 bits.
    let y = f
        .tensor("blk.0.attn_q.weight")
        .unwrap()
        .dequantize_f32()
        .unwrap();
    let err = rms(x.iter().zip(&y).map(|(a, b)| a - b));
    assert!(err < 0.25 * rms(x.iter().copied()), "{err}");
    for p in [&model, &out, &im] {
        std::fs::remove_file(p).ok();
    }
}

/// The IQ1/IQ2 mixtures and IQ3_XXS: llama-quantize's types per tensor role, refused without
/// an importance matrix, and each lattice type within its bits of the weights.
#[test]
fn lattice_mixtures_plan_like_llama_quantize() {
    let names = [
        "blk.0.attn_q.weight",
        "blk.0.attn_v.weight",
        "blk.0.attn_output.weight",
        "blk.0.ffn_down.weight",
    ];
    let model = tmp("tiny-lattice.gguf");
    let x = write_tiny_model(&model, &names);
    let im = tmp("tiny-lattice.imatrix.gguf");
    write_tiny_imatrix(&im, &names);
    let out = tmp("tiny-lattice-out.gguf");
    let (m, o, i) = (
        model.to_str().unwrap(),
        out.to_str().unwrap(),
        im.to_str().unwrap(),
    );
    use GgmlDType as T;
    // Per recipe: attention Q, V, output and FFN down (one layer: none in the first eighth),
    // and a bound on the relative RMS error of each (uniform weights; about 1.1x what the
    // types reach).
    for (recipe, want, max_rel_err) in [
        ("IQ1_S", [T::IQ1S, T::Q2K, T::IQ2XXS, T::IQ1S], 0.45),
        ("IQ1_M", [T::IQ1M, T::Q2K, T::IQ2XXS, T::IQ1M], 0.42),
        ("IQ2_XXS", [T::IQ2XXS, T::Q2K, T::IQ2XXS, T::IQ2XXS], 0.4),
        ("IQ2_XS", [T::IQ2XS, T::Q2K, T::IQ2XS, T::IQ2XS], 0.34),
        ("IQ2_S", [T::IQ2XS, T::IQ3S, T::IQ3S, T::IQ2XS], 0.34),
        ("IQ2_M", [T::IQ2S, T::IQ3S, T::IQ3S, T::IQ2S], 0.24),
        ("IQ3_XXS", [T::IQ2S, T::IQ3XXS, T::IQ3S, T::IQ3XXS], 0.24),
    ] {
        std::fs::remove_file(&out).ok();
        let r = quantize_with(&[m, o, "--type", recipe]);
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(!r.status.success(), "{recipe}: {err}");
        assert!(err.contains("importance matrix"), "{recipe}: {err}");
        assert!(!out.exists(), "{recipe}");

        let r = quantize_with(&[m, o, "--type", recipe, "--imatrix", i]);
        assert!(
            r.status.success(),
            "{recipe}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        let f = GgufFile::open(&out).unwrap();
        for (n, want) in names.iter().zip(want) {
            assert_eq!(
                f.content().tensor_info(n).unwrap().dtype,
                want,
                "{recipe} {n}"
            );
            let y = f.tensor(n).unwrap().dequantize_f32().unwrap();
            let err = rms(x.iter().zip(&y).map(|(a, b)| a - b)) / rms(x.iter().copied());
            assert!(err < max_rel_err, "{recipe} {n}: relative error {err}");
        }
    }
    for p in [&model, &out, &im] {
        std::fs::remove_file(p).ok();
    }
}
