//! Op conformance against NumPy. `tests/numpy/gen_cases.py` computes every expectation with
//! NumPy (float64 math on the exact inputs); this file runs the same op in hanzo-ml and
//! compares within each case's tolerance. Set HANZO_NUMPY_CASES to a freshly generated file
//! (scripts/test.sh does); otherwise the checked-in `tests/numpy/cases.json` is used.

use hanzo_ml::{AttentionMask, Conv2dParams, DType, Device, Result, RopeKind, Tensor};
use serde_json::Value;

fn dtype(s: &str) -> DType {
    match s {
        "f32" => DType::F32,
        "f64" => DType::F64,
        "f16" => DType::F16,
        "bf16" => DType::BF16,
        "u8" => DType::U8,
        "u32" => DType::U32,
        "i64" => DType::I64,
        other => panic!("unknown dtype {other}"),
    }
}

fn num(v: &Value) -> f64 {
    match v {
        Value::String(s) if s == "nan" => f64::NAN,
        Value::String(s) if s == "inf" => f64::INFINITY,
        Value::String(s) if s == "-inf" => f64::NEG_INFINITY,
        v => v.as_f64().expect("number"),
    }
}

fn usizes(v: &Value) -> Vec<usize> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("uint") as usize)
        .collect()
}

fn input(spec: &Value) -> Result<Tensor> {
    let data: Vec<f64> = spec["data"].as_array().unwrap().iter().map(num).collect();
    let t = Tensor::from_vec(data, usizes(&spec["shape"]), &Device::Cpu)?
        .to_dtype(dtype(spec["dtype"].as_str().unwrap()))?;
    let Some(view) = spec.get("view") else {
        return Ok(t);
    };
    let (kind, v) = view.as_object().unwrap().iter().next().unwrap();
    let a = usizes(v);
    match kind.as_str() {
        "transpose" => t.transpose(a[0], a[1]),
        "narrow" => t.narrow(a[0], a[1], a[2]),
        "broadcast" => t.broadcast_as(a),
        "permute" => t.permute(&a),
        k => panic!("unknown view {k}"),
    }
}

fn run(op: &str, x: &[Tensor], a: &Value) -> Result<Tensor> {
    let u = |k: &str| a[k].as_u64().unwrap() as usize;
    let f = |k: &str| a[k].as_f64().unwrap();
    let dims = || usizes(&a["dims"]);
    let keep = || a["keepdim"].as_bool().unwrap();
    Ok(match op {
        "neg" => x[0].neg()?,
        "abs" => x[0].abs()?,
        "exp" => x[0].exp()?,
        "log" => x[0].log()?,
        "sqrt" => x[0].sqrt()?,
        "sqr" => x[0].sqr()?,
        "recip" => x[0].recip()?,
        "relu" => x[0].relu()?,
        "gelu" => x[0].gelu()?,
        "gelu_erf" => x[0].gelu_erf()?,
        "silu" => x[0].silu()?,
        "tanh" => x[0].tanh()?,
        "sigmoid" => x[0].sigmoid()?,
        "sin" => x[0].sin()?,
        "cos" => x[0].cos()?,
        "floor" => x[0].floor()?,
        "ceil" => x[0].ceil()?,
        "round" => x[0].round()?,
        "sign" => x[0].sign()?,
        "affine" => x[0].affine(f("mul"), f("add"))?,
        "clamp" => x[0].clamp(f("min"), f("max"))?,
        "powf" => x[0].powf(f("e"))?,
        "add" => x[0].add(&x[1])?,
        "sub" => x[0].sub(&x[1])?,
        "mul" => x[0].mul(&x[1])?,
        "div" => x[0].div(&x[1])?,
        "maximum" => x[0].maximum(&x[1])?,
        "minimum" => x[0].minimum(&x[1])?,
        "pow" => x[0].pow(&x[1])?,
        "eq" => x[0].eq(&x[1])?,
        "ne" => x[0].ne(&x[1])?,
        "lt" => x[0].lt(&x[1])?,
        "le" => x[0].le(&x[1])?,
        "gt" => x[0].gt(&x[1])?,
        "ge" => x[0].ge(&x[1])?,
        "where_cond" => x[0].where_cond(&x[1], &x[2])?,
        "sum" if keep() => x[0].sum_keepdim(dims())?,
        "sum" => x[0].sum(dims())?,
        "mean" if keep() => x[0].mean_keepdim(dims())?,
        "mean" => x[0].mean(dims())?,
        "max" if keep() => x[0].max_keepdim(dims())?,
        "max" => x[0].max(dims())?,
        "min" if keep() => x[0].min_keepdim(dims())?,
        "min" => x[0].min(dims())?,
        "var" => x[0].var(dims())?,
        "argmax" => x[0].argmax(u("dim"))?,
        "argmin" => x[0].argmin(u("dim"))?,
        "cumsum" => x[0].cumsum(u("dim"))?,
        "sum_all" => x[0].sum_all()?,
        "argsort" => x[0].argsort(u("dim"), a["asc"].as_bool().unwrap())?,
        "topk_values" => x[0].topk(u("k"), u("dim"))?.0,
        "topk_indices" => x[0].topk(u("k"), u("dim"))?.1,
        "matmul" => x[0].matmul(&x[1])?,
        "reshape" => x[0].reshape(usizes(&a["shape"]))?,
        "contiguous" => x[0].contiguous()?,
        "cat" => Tensor::cat(&x.iter().collect::<Vec<_>>(), u("dim"))?,
        "stack" => Tensor::stack(&x.iter().collect::<Vec<_>>(), u("dim"))?,
        "pad" => {
            let pads: Vec<(usize, usize)> = a["pads"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| (usizes(p)[0], usizes(p)[1]))
                .collect();
            x[0].pad(&pads, f("value"))?
        }
        "unsqueeze" => x[0].unsqueeze(u("dim"))?,
        "flatten" => x[0].flatten(u("start"), u("end"))?,
        "chunk" => x[0].chunk(u("n"), u("dim"))?[u("i")].clone(),
        "index_select" => x[0].index_select(&x[1], u("dim"))?,
        "gather" => x[0].gather(&x[1], u("dim"))?,
        "scatter_add" => x[0].scatter_add(&x[1], &x[2], u("dim"))?,
        "index_add" => x[0].index_add(&x[1], &x[2], u("dim"))?,
        "embedding" => x[0].embedding(&x[1])?,
        "softmax" => x[0].softmax(u("dim"))?,
        "log_softmax" => x[0].log_softmax(u("dim"))?,
        "layer_norm" => x[0].layer_norm(&x[1], Some(&x[2]), f("eps"))?,
        "rms_norm" => x[0].rms_norm(&x[1], f("eps"))?,
        "rope" => {
            let kind = if a["interleaved"].as_bool().unwrap() {
                RopeKind::Interleaved
            } else {
                RopeKind::HalfSplit
            };
            x[0].rotary_emb(&x[1], &x[2], kind)?
        }
        "sdpa" => {
            let mask = match a["mask"].as_str().unwrap() {
                "causal" => AttentionMask::Causal,
                "additive" => AttentionMask::Additive(&x[3]),
                _ => AttentionMask::None,
            };
            Tensor::scaled_dot_product_attention(
                &x[0],
                &x[1],
                &x[2],
                mask,
                a.get("scale").and_then(|s| s.as_f64()),
            )?
        }
        "conv2d" | "conv_transpose2d" => {
            let pair = |k: &str| (usizes(&a[k])[0], usizes(&a[k])[1]);
            let p = Conv2dParams {
                padding: pair("padding"),
                stride: pair("stride"),
                dilation: pair("dilation"),
                groups: u("groups"),
            };
            if op == "conv2d" {
                x[0].conv2d_with(&x[1], &p)?
            } else {
                x[0].conv_transpose2d_with(&x[1], &p, pair("output_padding"))?
            }
        }
        "conv1d" => x[0].conv1d(&x[1], u("padding"), u("stride"), u("dilation"), u("groups"))?,
        "conv_transpose1d" => x[0].conv_transpose1d(
            &x[1],
            u("padding"),
            u("output_padding"),
            u("stride"),
            u("dilation"),
            u("groups"),
        )?,
        "avg_pool2d" | "max_pool2d" => {
            let (k, s) = (usizes(&a["k"]), usizes(&a["stride"]));
            if op == "avg_pool2d" {
                x[0].avg_pool2d((k[0], k[1]), (s[0], s[1]))?
            } else {
                x[0].max_pool2d((k[0], k[1]), (s[0], s[1]))?
            }
        }
        "upsample_nearest2d" => x[0].upsample_nearest2d(u("h"), u("w"))?,
        other => panic!("unknown op {other}"),
    })
}

/// Run one case; `Err` describes the mismatch.
fn check(case: &Value) -> std::result::Result<(), String> {
    let inputs: Vec<Tensor> = case["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(input)
        .collect::<Result<_>>()
        .map_err(|e| format!("input: {e}"))?;
    let got = run(case["op"].as_str().unwrap(), &inputs, &case["args"])
        .map_err(|e| format!("error: {e}"))?;
    let exp = &case["expected"];
    let (want_dt, want_shape) = (dtype(exp["dtype"].as_str().unwrap()), usizes(&exp["shape"]));
    if got.dtype() != want_dt || got.dims() != want_shape {
        return Err(format!(
            "got {:?} {:?}, want {want_dt:?} {want_shape:?}",
            got.dtype(),
            got.dims()
        ));
    }
    let got = got
        .to_dtype(DType::F64)
        .and_then(|t| t.flatten_all()?.to_vec1::<f64>())
        .map_err(|e| e.to_string())?;
    let (atol, rtol) = (
        case["atol"].as_f64().unwrap(),
        case["rtol"].as_f64().unwrap(),
    );
    for (i, (g, w)) in got
        .iter()
        .zip(exp["data"].as_array().unwrap().iter().map(num))
        .enumerate()
    {
        let ok = (g.is_nan() && w.is_nan()) || g == &w || (g - w).abs() <= atol + rtol * w.abs();
        if !ok {
            return Err(format!(
                "element {i}: got {g}, numpy {w} (atol {atol}, rtol {rtol})"
            ));
        }
    }
    Ok(())
}

#[test]
fn ops_match_numpy() {
    let path = std::env::var("HANZO_NUMPY_CASES").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/numpy/cases.json").to_string()
    });
    let cases: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("read cases"))
            .expect("parse cases");
    assert!(cases.len() >= 150, "only {} cases in {path}", cases.len());
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|c| {
            check(c)
                .err()
                .map(|e| format!("{}: {e}", c["name"].as_str().unwrap()))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} NumPy cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    eprintln!("{} NumPy cases passed ({path})", cases.len());
}
