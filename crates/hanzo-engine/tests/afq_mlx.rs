//! AFQ models against MLX itself (`scripts/reference/mlx_afq.py`: PyPI `mlx[cpu]` and
//! `mlx-lm`), on SmolLM2 as a Hugging Face directory (scripts/gguf_to_hf.py):
//!
//! - `hanzo-engine quantize --type AFQ4` of the bf16 model writes the tensors
//!   `mlx_lm.convert -q` writes, bit for bit, and we read MLX's directory to the same model;
//! - `mlx_lm` loads the file we write from the f32 model, and its logits (f32 activations)
//!   are ours with the weights dequantized to f32, to a few hundredths (as transformers' are); our quantized
//!   kernels (8-bit activations) track them as they track transformers for the GGUF types.

mod common;

use common::{engine, fixture};
use hanzo_ml::io::safetensors::MmapedSafetensors;
use hanzo_transformers::{load_dir, LanguageModel, Logits, WeightMode};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// A prompt's token ids (SmolLM2's tokenizer): "The capital of France is Paris, and the".
const IDS: [u32; 10] = [504, 3575, 282, 4649, 314, 7042, 28, 284, 260, 2151];

fn tmp(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(name)
}

fn python(args: &[&str]) {
    let out = Command::new("python3")
        .args(args)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "python3 {args:?} (pip install 'mlx[cpu]' mlx-lm, or run scripts/test.sh):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn script(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// SmolLM2 as an f32 Hugging Face directory, and the same in bf16 (MLX's usual source).
fn sources() -> &'static (PathBuf, PathBuf) {
    static DIRS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    DIRS.get_or_init(|| {
        let (f32_dir, bf16_dir) = (tmp("afq-smollm2-hf"), tmp("afq-smollm2-bf16"));
        let src = fixture("smollm2");
        python(&[
            &script("gguf_to_hf.py"),
            src.to_str().unwrap(),
            f32_dir.to_str().unwrap(),
        ]);
        python(&[
            &script("reference/mlx_afq.py"),
            "bf16",
            f32_dir.to_str().unwrap(),
            bf16_dir.to_str().unwrap(),
        ]);
        (f32_dir, bf16_dir)
    })
}

fn quantize(src: &Path, out: &Path) {
    let r = engine(&[
        "quantize",
        src.to_str().unwrap(),
        out.to_str().unwrap(),
        "--type",
        "AFQ4",
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
}

fn logits(model: &dyn LanguageModel) -> Vec<Vec<f32>> {
    let mut cache = model.new_cache(64);
    let all = model.forward(&IDS, &mut cache, Logits::All).unwrap();
    let v = all.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    v.chunks(v.len() / IDS.len()).map(|r| r.to_vec()).collect()
}

fn argmax(v: &[f32]) -> usize {
    (0..v.len()).fold(0, |b, i| if v[i] > v[b] { i } else { b })
}

#[test]
fn quantize_writes_what_mlx_lm_convert_writes_and_reads_it_back() {
    let (_, bf16) = sources();
    let (ours, theirs) = (tmp("afq-ours-bf16"), tmp("afq-mlx-bf16"));
    quantize(bf16, &ours);
    python(&[
        &script("reference/mlx_afq.py"),
        "convert",
        bf16.to_str().unwrap(),
        theirs.to_str().unwrap(),
    ]);

    let a = MmapedSafetensors::new(ours.join("model.safetensors")).unwrap();
    let b = MmapedSafetensors::new(theirs.join("model.safetensors")).unwrap();
    let (mut na, mut nb) = (a.names(), b.names());
    na.sort();
    nb.sort();
    assert_eq!(na, nb, "tensor names");
    let raw = |st: &MmapedSafetensors, n: &str| {
        let t = st.get(n).unwrap();
        (
            t.dtype(),
            t.dims().to_vec(),
            t.to_dtype(hanzo_ml::DType::F32)
                .ok()
                .map(|t| t.flatten_all().unwrap().to_vec1::<f32>().unwrap()),
            t.to_dtype(hanzo_ml::DType::U32)
                .ok()
                .and_then(|t| t.flatten_all().unwrap().to_vec1::<u32>().ok()),
        )
    };
    let mut quantized = 0;
    for n in &na {
        let (ta, tb) = (raw(&a, n), raw(&b, n));
        assert_eq!((ta.0, &ta.1), (tb.0, &tb.1), "{n}: dtype and shape");
        match ta.0 {
            hanzo_ml::DType::U32 => assert!(ta.3 == tb.3, "{n}: packed levels differ from MLX's"),
            _ => assert!(
                ta.2.as_ref()
                    .unwrap()
                    .iter()
                    .zip(tb.2.as_ref().unwrap())
                    .all(|(x, y)| x.to_bits() == y.to_bits()),
                "{n} differs from MLX's"
            ),
        }
        quantized += n.ends_with(".scales") as usize;
    }
    assert_eq!(
        quantized,
        30 * 7 + 1,
        "every linear layer and the embedding"
    );

    // MLX's directory, read by us, is the model ours is: the same logits to the bit.
    let from_ours = logits(load_dir(&ours, WeightMode::AsStored).unwrap().as_ref());
    let from_theirs = logits(load_dir(&theirs, WeightMode::AsStored).unwrap().as_ref());
    assert_eq!(from_ours, from_theirs);
}

#[test]
fn mlx_lm_runs_our_file_as_we_do() {
    let (f32_dir, _) = sources();
    let ours = tmp("afq-ours-f32");
    quantize(f32_dir, &ours);
    let out = tmp("afq-mlx-logits.json");
    let ids: Vec<String> = IDS.iter().map(|i| i.to_string()).collect();
    let mut args = vec![
        script("reference/mlx_afq.py"),
        "logits".into(),
        ours.to_string_lossy().into_owned(),
        out.to_string_lossy().into_owned(),
    ];
    args.extend(ids);
    python(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let theirs = r["positions"].as_array().unwrap();

    let check = |mode: WeightMode, max: f32, clear_margin: f64, what: &str| {
        let ours = logits(load_dir(&ours, mode).unwrap().as_ref());
        let (mut worst, mut agree) = (0f32, 0);
        for (o, t) in ours.iter().zip(theirs) {
            for (i, want) in t["first64"].as_array().unwrap().iter().enumerate() {
                worst = worst.max((o[i] - want.as_f64().unwrap() as f32).abs());
            }
            for pair in t["top5"].as_array().unwrap() {
                let id = pair[0].as_u64().unwrap() as usize;
                worst = worst.max((o[id] - pair[1].as_f64().unwrap() as f32).abs());
            }
            let top5 = t["top5"].as_array().unwrap();
            let margin = top5[0][1].as_f64().unwrap() - top5[1][1].as_f64().unwrap();
            if argmax(o) as u64 == t["argmax"].as_u64().unwrap() {
                agree += 1;
            } else {
                assert!(
                    margin < clear_margin,
                    "{what}: argmax differs where mlx_lm's margin is {margin}"
                );
            }
        }
        eprintln!(
            "{what}: max |Δ logit| {worst:.4} against mlx_lm, {agree}/{} argmax agree",
            IDS.len()
        );
        assert!(worst < max, "{what}: logits {worst} from mlx_lm's");
        agree
    };
    let f32_agree = check(WeightMode::F32, 0.03, 0.0, "AFQ4 dequantized to f32");
    assert_eq!(f32_agree, IDS.len());
    // 8-bit activations: within a logit or two, as the GGUF types against transformers, and
    // the argmax the same wherever mlx_lm's top two are a logit apart.
    check(WeightMode::AsStored, 2.0, 1.0, "AFQ4 kernels");
}

/// An MLX directory that does not add up is a clear error naming what, never a panic.
#[test]
fn malformed_mlx_directories_get_clear_errors() {
    let (f32_dir, _) = sources();
    let good = tmp("afq-ours-f32-for-errors");
    quantize(f32_dir, &good);
    let bad = tmp("afq-malformed");
    let _ = std::fs::remove_dir_all(&bad);
    std::fs::create_dir_all(&bad).unwrap();
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(good.join(f), bad.join(f)).unwrap();
    }
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(good.join("config.json")).unwrap()).unwrap();
    let error_with =
        |config: &Value, tensors: &std::collections::HashMap<String, hanzo_ml::Tensor>| {
            std::fs::write(bad.join("config.json"), config.to_string()).unwrap();
            hanzo_ml::io::safetensors::save(tensors, bad.join("model.safetensors")).unwrap();
            match load_dir(&bad, WeightMode::AsStored) {
                Ok(_) => panic!("loaded"),
                Err(e) => e.to_string(),
            }
        };
    let tensors = MmapedSafetensors::new(good.join("model.safetensors"))
        .unwrap()
        .load_all()
        .unwrap();

    let mut c = config.clone();
    c["quantization"]["group_size"] = 48.into();
    let e = error_with(&c, &tensors);
    assert!(e.contains("group size 48"), "{e}");

    let mut c = config.clone();
    c["quantization"]["mode"] = "mxfp4".into();
    let e = error_with(&c, &tensors);
    assert!(e.contains("mxfp4") && e.contains("affine"), "{e}");

    // A group size the shapes contradict: the weights come out of the wrong width.
    let mut c = config.clone();
    c["quantization"]["group_size"] = 32.into();
    let e = error_with(&c, &tensors);
    assert!(e.contains("has shape"), "{e}");

    let name = "model.layers.0.mlp.down_proj.scales";
    let mut t = tensors.clone();
    let s = &t[name];
    t.insert(
        name.into(),
        s.narrow(1, 0, s.dims()[1] - 1)
            .unwrap()
            .contiguous()
            .unwrap(),
    );
    let e = error_with(&config, &t);
    assert!(e.contains("model.layers.0.mlp.down_proj"), "{e}");
}
