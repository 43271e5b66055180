//! Which type each tensor gets: llama.cpp's quantization mixtures (`Q4_K_M` keeps the most
//! sensitive tensors — the output projection, some attention V and FFN down layers — at
//! higher precision), its list of tensors never quantized, and its fallbacks for row widths
//! a block type cannot divide.

use anyhow::{bail, Result};
use hanzo_ml::quantized::isq::fallback_type;
use hanzo_ml::quantized::GgmlDType;

/// A `--type` choice: a base block type and, for the named mixtures, its size letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recipe {
    pub name: &'static str,
    pub base: GgmlDType,
    /// llama.cpp's `general.file_type` id for this recipe.
    pub file_type: u32,
}

const RECIPES: &[Recipe] = &[
    Recipe {
        name: "F32",
        base: GgmlDType::F32,
        file_type: 0,
    },
    Recipe {
        name: "F16",
        base: GgmlDType::F16,
        file_type: 1,
    },
    Recipe {
        name: "BF16",
        base: GgmlDType::BF16,
        file_type: 32,
    },
    Recipe {
        name: "Q4_0",
        base: GgmlDType::Q4_0,
        file_type: 2,
    },
    Recipe {
        name: "Q4_1",
        base: GgmlDType::Q4_1,
        file_type: 3,
    },
    Recipe {
        name: "Q8_0",
        base: GgmlDType::Q8_0,
        file_type: 7,
    },
    Recipe {
        name: "Q5_0",
        base: GgmlDType::Q5_0,
        file_type: 8,
    },
    Recipe {
        name: "Q5_1",
        base: GgmlDType::Q5_1,
        file_type: 9,
    },
    Recipe {
        name: "Q2_K",
        base: GgmlDType::Q2K,
        file_type: 10,
    },
    Recipe {
        name: "Q3_K_S",
        base: GgmlDType::Q3K,
        file_type: 11,
    },
    Recipe {
        name: "Q3_K_M",
        base: GgmlDType::Q3K,
        file_type: 12,
    },
    Recipe {
        name: "Q3_K_L",
        base: GgmlDType::Q3K,
        file_type: 13,
    },
    Recipe {
        name: "Q4_K_S",
        base: GgmlDType::Q4K,
        file_type: 14,
    },
    Recipe {
        name: "Q4_K_M",
        base: GgmlDType::Q4K,
        file_type: 15,
    },
    Recipe {
        name: "Q5_K_S",
        base: GgmlDType::Q5K,
        file_type: 16,
    },
    Recipe {
        name: "Q5_K_M",
        base: GgmlDType::Q5K,
        file_type: 17,
    },
    Recipe {
        name: "Q6_K",
        base: GgmlDType::Q6K,
        file_type: 18,
    },
    Recipe {
        name: "IQ4_NL",
        base: GgmlDType::IQ4NL,
        file_type: 25,
    },
    Recipe {
        name: "IQ4_XS",
        base: GgmlDType::IQ4XS,
        file_type: 30,
    },
    // The lattice mixtures: below 3 bits they need an importance matrix (`--imatrix`).
    Recipe {
        name: "IQ1_S",
        base: GgmlDType::IQ1S,
        file_type: 24,
    },
    Recipe {
        name: "IQ1_M",
        base: GgmlDType::IQ1M,
        file_type: 31,
    },
    Recipe {
        name: "IQ2_XXS",
        base: GgmlDType::IQ2XXS,
        file_type: 19,
    },
    Recipe {
        name: "IQ2_XS",
        base: GgmlDType::IQ2XS,
        file_type: 20,
    },
    // IQ2_S is an IQ2_XS mixture with more IQ3_S, and IQ2_M the same over IQ2_S (the type).
    Recipe {
        name: "IQ2_S",
        base: GgmlDType::IQ2XS,
        file_type: 28,
    },
    Recipe {
        name: "IQ2_M",
        base: GgmlDType::IQ2S,
        file_type: 29,
    },
    Recipe {
        name: "IQ3_XXS",
        base: GgmlDType::IQ3XXS,
        file_type: 23,
    },
    Recipe {
        name: "IQ3_XS",
        base: GgmlDType::IQ3S,
        file_type: 22,
    },
    Recipe {
        name: "IQ3_S",
        base: GgmlDType::IQ3S,
        file_type: 26,
    },
    Recipe {
        name: "IQ3_M",
        base: GgmlDType::IQ3S,
        file_type: 27,
    },
    // Ternary weights, for models trained ternary (BitNet b1.58); anything else turns to
    // noise.
    Recipe {
        name: "TQ1_0",
        base: GgmlDType::TQ1_0,
        file_type: 36,
    },
    Recipe {
        name: "TQ2_0",
        base: GgmlDType::TQ2_0,
        file_type: 37,
    },
    Recipe {
        name: "MXFP4_MOE",
        base: GgmlDType::MXFP4,
        file_type: 38,
    },
];

impl Recipe {
    /// The recipe a GGUF's `general.file_type` names, if we can write it.
    pub fn by_file_type(id: u64) -> Option<Self> {
        RECIPES
            .iter()
            .find(|r| u64::from(r.file_type) == id)
            .copied()
    }

    /// Parses a `--type` value (case-insensitive; `Q3_K`, `Q4_K`, `Q5_K` mean their `_M` mix,
    /// as in llama-quantize, and `MXFP4` means `MXFP4_MOE`).
    pub fn parse(s: &str) -> Result<Self> {
        let up = s.to_ascii_uppercase();
        let up = match up.as_str() {
            "Q3_K" | "Q4_K" | "Q5_K" => format!("{up}_M"),
            "MXFP4" => "MXFP4_MOE".into(),
            _ => up,
        };
        match RECIPES.iter().find(|r| r.name == up) {
            Some(r) => Ok(*r),
            None => {
                let names: Vec<&str> = RECIPES.iter().map(|r| r.name).collect();
                bail!(
                    "unknown quantization type {s:?}; choose one of {}",
                    names.join(", ")
                )
            }
        }
    }
}

/// Broad tensor roles; both GGUF (`blk.0.attn_v.weight`) and Hugging Face
/// (`model.layers.0.self_attn.v_proj.weight`) names are recognised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    TokenEmbd,
    Output,
    AttnQ,
    AttnK,
    AttnV,
    AttnQkv,
    AttnOutput,
    FfnUp,
    FfnGate,
    FfnDown,
    Other,
}

pub fn category(name: &str) -> Category {
    let has = |s: &str| name.contains(s);
    if name == "output.weight" || name == "lm_head.weight" {
        Category::Output
    } else if name == "token_embd.weight" || name.ends_with("embed_tokens.weight") {
        Category::TokenEmbd
    } else if has("attn_qkv.weight") || has("attn_kv_b.weight") || has("qkv_proj.weight") {
        Category::AttnQkv
    } else if has("attn_v.weight") || has("v_proj.weight") {
        Category::AttnV
    } else if has("attn_k.weight") || has("k_proj.weight") {
        Category::AttnK
    } else if has("attn_q.weight") || has("q_proj.weight") {
        Category::AttnQ
    } else if has("attn_output.weight") || has("o_proj.weight") {
        Category::AttnOutput
    } else if has("ffn_up") || has("up_proj") {
        Category::FfnUp
    } else if has("ffn_gate") || has("gate_proj") {
        Category::FfnGate
    } else if has("ffn_down") || has("down_proj") {
        Category::FfnDown
    } else {
        Category::Other
    }
}

/// llama.cpp's rule for tensors that are never quantized: 1-D tensors, norms, MoE routers,
/// position and token-type embeddings, and a few small special-purpose weights.
pub fn allows_quantization(name: &str, rank: usize) -> bool {
    const NEVER: &[&str] = &[
        "_norm.weight",
        "ffn_gate_inp.weight",
        "altup",
        "laurel",
        "per_layer_model_proj",
        "ssm_conv1d",
        "attn_rel_b.weight",
        "position_embd.weight",
        "token_types.weight",
        "position_embeddings",
        "token_type_embeddings",
        "layernorm",
        "LayerNorm",
    ];
    rank >= 2 && name.ends_with("weight") && !NEVER.iter().any(|n| name.contains(n))
}

/// Picks each tensor's type in file order (llama.cpp counts attention-V and FFN-down tensors
/// as it goes, so the order matters).
pub struct Planner {
    recipe: Recipe,
    pure: bool,
    n_gqa: usize,
    /// Quantizing with an importance matrix changes two of llama.cpp's choices.
    has_importance: bool,
    tied_embeddings: bool,
    n_attn_v: usize,
    n_ffn_down: usize,
    n_ffn_gate: usize,
    n_ffn_up: usize,
    i_attn_v: usize,
    i_ffn_down: usize,
    i_ffn_gate: usize,
    i_ffn_up: usize,
}

/// llama.cpp's choice of layers that get more bits: the first and last eighth, and every
/// third layer in between.
fn use_more_bits(i: usize, n: usize) -> bool {
    let (i, n) = (i as i64, n as i64);
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

impl Planner {
    pub fn new(recipe: Recipe, pure: bool, names: &[&str], n_gqa: usize) -> Self {
        let count = |f: fn(Category) -> bool| names.iter().filter(|n| f(category(n))).count();
        Self {
            recipe,
            pure,
            n_gqa,
            has_importance: false,
            tied_embeddings: !names.iter().any(|n| category(n) == Category::Output),
            n_attn_v: count(|c| matches!(c, Category::AttnV | Category::AttnQkv)),
            n_ffn_down: count(|c| c == Category::FfnDown),
            n_ffn_gate: count(|c| c == Category::FfnGate),
            n_ffn_up: count(|c| c == Category::FfnUp),
            i_attn_v: 0,
            i_ffn_down: 0,
            i_ffn_gate: 0,
            i_ffn_up: 0,
        }
    }

    /// Plans for quantizing with an importance matrix.
    pub fn with_importance(mut self, yes: bool) -> Self {
        self.has_importance = yes;
        self
    }

    /// The type for tensor `name` of row-major `shape` currently stored as `source`.
    pub fn plan(&mut self, name: &str, shape: &[usize], source: GgmlDType) -> GgmlDType {
        if !allows_quantization(name, shape.len()) {
            return source;
        }
        let base = self.recipe.base;
        if !base.is_quantized() {
            return base;
        }
        let ncols = shape.last().copied().unwrap_or(1);
        let t = if self.pure {
            base
        } else if base == GgmlDType::MXFP4 {
            // MXFP4_MOE: the expert stacks in MXFP4, everything else in Q8_0.
            if shape.len() == 3 && shape[0] > 1 {
                base
            } else {
                GgmlDType::Q8_0
            }
        } else {
            self.mixture(name, ncols)
        };
        fallback_type(t, ncols)
    }

    fn mixture(&mut self, name: &str, ncols: usize) -> GgmlDType {
        let r = self.recipe.name;
        let category = category(name);
        match category {
            Category::Output => return output_type(r, self.recipe.base, ncols),
            Category::TokenEmbd if self.tied_embeddings => {
                return output_type(r, self.recipe.base, ncols)
            }
            Category::TokenEmbd => return token_embd_type(r, self.recipe.base),
            _ => {}
        }
        // The position of this tensor among those of its kind, and their count.
        let counter = match category {
            Category::AttnV | Category::AttnQkv => Some((&mut self.i_attn_v, self.n_attn_v)),
            Category::FfnDown => Some((&mut self.i_ffn_down, self.n_ffn_down)),
            Category::FfnGate => Some((&mut self.i_ffn_gate, self.n_ffn_gate)),
            Category::FfnUp => Some((&mut self.i_ffn_up, self.n_ffn_up)),
            _ => None,
        };
        let (i, n) = match counter {
            Some((i, n)) => {
                *i += 1;
                (*i - 1, n)
            }
            None => (0, 0),
        };
        let layer = Layer {
            i,
            n,
            n_gqa: self.n_gqa,
            has_importance: self.has_importance,
        };
        if LOW_BIT.contains(&r) {
            low_bit_type(r, self.recipe.base, category, &layer)
        } else {
            mixture_type(r, self.recipe.base, category, &layer)
        }
    }
}

/// Where a tensor sits among those of its kind, and what the plan knows of the model.
struct Layer {
    i: usize,
    n: usize,
    n_gqa: usize,
    has_importance: bool,
}

/// The mixtures below 3 bits, which llama.cpp plans by rules of their own.
const LOW_BIT: &[&str] = &["IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M"];

/// The IQ1/IQ2 mixtures: attention V, the first eighth of FFN down and attention output get
/// more bits (IQ3_S in IQ2_S/IQ2_M, Q2_K or IQ2_XXS in the others).
fn low_bit_type(r: &str, base: GgmlDType, category: Category, at: &Layer) -> GgmlDType {
    use GgmlDType as T;
    let wider = if matches!(r, "IQ2_S" | "IQ2_M") {
        T::IQ3S
    } else {
        T::Q2K
    };
    match category {
        Category::AttnV | Category::AttnQkv if at.n_gqa >= 4 => T::Q4K,
        Category::AttnV | Category::AttnQkv => wider,
        Category::FfnDown if at.i < at.n / 8 => wider,
        Category::AttnOutput if matches!(r, "IQ1_S" | "IQ1_M") => T::IQ2XXS,
        Category::AttnOutput if matches!(r, "IQ2_S" | "IQ2_M") => T::IQ3S,
        _ => base,
    }
}

/// The other mixtures.
fn mixture_type(r: &str, base: GgmlDType, category: Category, at: &Layer) -> GgmlDType {
    use GgmlDType as T;
    let (i, n) = (at.i, at.n);
    match category {
        Category::AttnV | Category::AttnQkv => match r {
            "Q2_K" if at.n_gqa >= 4 => T::Q4K,
            "Q2_K" => T::Q3K,
            "IQ3_XXS" if at.n_gqa >= 4 => T::Q4K,
            "IQ3_XXS" if !at.has_importance => T::IQ3S,
            "Q3_K_M" if i < 2 => T::Q5K,
            "Q3_K_M" => T::Q4K,
            "Q3_K_L" => T::Q5K,
            "IQ4_NL" | "IQ4_XS" if at.n_gqa >= 4 => T::Q5K,
            "IQ3_XS" | "IQ3_S" if at.n_gqa >= 4 => T::Q4K,
            "IQ3_M" => T::Q4K,
            "Q4_K_M" | "Q5_K_M" if use_more_bits(i, n) => T::Q6K,
            "Q4_K_S" if i < 4 => T::Q5K,
            _ => base,
        },
        Category::FfnDown => match r {
            "Q2_K" => T::Q3K,
            "IQ3_XXS" if !at.has_importance && i < n / 8 => T::Q4K,
            "IQ3_XXS" if !at.has_importance => T::Q3K,
            "Q3_K_M" if i < n / 16 => T::Q5K,
            "Q3_K_M" => T::Q4K,
            "Q3_K_L" => T::Q5K,
            "Q4_K_M" | "Q5_K_M" if use_more_bits(i, n) => T::Q6K,
            // Without importance the first layers' FFN down is IQ4's weak spot; with it,
            // Q4_0 and Q5_0 get llama.cpp's guard there instead.
            "IQ4_NL" | "IQ4_XS" if i < n / 8 && !at.has_importance => T::Q5K,
            "Q4_K_S" if i < n / 8 => T::Q5K,
            "IQ3_M" if i < n / 8 => T::Q4K,
            "Q4_0" if i < n / 8 && at.has_importance => T::Q4_1,
            "Q5_0" if i < n / 8 && at.has_importance => T::Q5_1,
            _ => base,
        },
        Category::AttnK | Category::AttnQ if r == "IQ3_XS" => T::IQ3XXS,
        Category::AttnK | Category::AttnQ if r == "IQ3_XXS" => T::IQ2S,
        Category::FfnGate | Category::FfnUp if r == "IQ3_XS" && i >= n / 8 && i < 7 * n / 8 => {
            T::IQ3XXS
        }
        Category::AttnOutput => match r {
            "Q2_K" => T::Q3K,
            "IQ3_XXS" => T::IQ3S,
            "Q3_K_M" | "IQ3_M" => T::Q4K,
            "Q3_K_L" => T::Q5K,
            _ => base,
        },
        _ => base,
    }
}

/// The output projection (and a tied embedding): Q8_0 when its rows are not whole blocks of
/// the recipe's type (or the recipe is already Q8_0), Q5_K for the lattice mixtures, else
/// Q6_K.
fn output_type(r: &str, base: GgmlDType, ncols: usize) -> GgmlDType {
    if !ncols.is_multiple_of(base.block_size()) || base == GgmlDType::Q8_0 {
        GgmlDType::Q8_0
    } else if LOW_BIT.contains(&r) || r == "IQ3_XXS" {
        GgmlDType::Q5K
    } else {
        GgmlDType::Q6K
    }
}

/// An untied token embedding: the low-bit mixtures keep it at Q2_K or IQ3_S, the ternary ones
/// at Q4_K.
fn token_embd_type(r: &str, base: GgmlDType) -> GgmlDType {
    use GgmlDType as T;
    match r {
        "IQ2_XXS" | "IQ2_XS" | "IQ1_S" | "IQ1_M" => T::Q2K,
        "IQ2_S" | "IQ2_M" | "IQ3_XXS" => T::IQ3S,
        "TQ1_0" | "TQ2_0" => T::Q4K,
        _ => base,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recipes_parse_like_llama_quantize() {
        assert_eq!(Recipe::parse("q4_k_m").unwrap().file_type, 15);
        assert_eq!(Recipe::parse("Q4_K").unwrap().name, "Q4_K_M");
        assert!(Recipe::parse("Q9_9")
            .unwrap_err()
            .to_string()
            .contains("Q4_K_M"));
        assert_eq!(Recipe::parse("iq4_xs").unwrap().file_type, 30);
        assert_eq!(Recipe::parse("iq3_m").unwrap().file_type, 27);
        assert_eq!(Recipe::parse("IQ3_XS").unwrap().base, GgmlDType::IQ3S);
        assert_eq!(Recipe::parse("iq2_s").unwrap().base, GgmlDType::IQ2XS);
        assert_eq!(Recipe::parse("IQ1_M").unwrap().file_type, 31);
    }

    #[test]
    fn mxfp4_moe_puts_only_expert_stacks_in_mxfp4() {
        let names = [
            "token_embd.weight",
            "output.weight",
            "blk.0.attn_q.weight",
            "blk.0.ffn_down_exps.weight",
        ];
        let mut p = Planner::new(Recipe::parse("MXFP4").unwrap(), false, &names, 8);
        let f16 = GgmlDType::F16;
        assert_eq!(
            p.plan("blk.0.ffn_down_exps.weight", &[32, 2880, 2880], f16),
            GgmlDType::MXFP4
        );
        assert_eq!(
            p.plan("blk.0.attn_q.weight", &[4096, 2880], f16),
            GgmlDType::Q8_0
        );
        assert_eq!(
            p.plan("output.weight", &[201088, 2880], f16),
            GgmlDType::Q8_0
        );
        assert_eq!(
            p.plan("token_embd.weight", &[201088, 2880], f16),
            GgmlDType::Q8_0
        );
    }

    #[test]
    fn low_bit_mixtures_keep_an_untied_embedding_wider() {
        let names = ["token_embd.weight", "output.weight", "blk.0.attn_q.weight"];
        let plan = |recipe: &str, name: &str| {
            let mut p = Planner::new(Recipe::parse(recipe).unwrap(), false, &names, 1);
            p.plan(name, &[1024, 2048], GgmlDType::F16)
        };
        assert_eq!(plan("IQ1_S", "token_embd.weight"), GgmlDType::Q2K);
        assert_eq!(plan("IQ2_M", "token_embd.weight"), GgmlDType::IQ3S);
        assert_eq!(plan("TQ1_0", "token_embd.weight"), GgmlDType::Q4K);
        assert_eq!(plan("IQ2_XXS", "output.weight"), GgmlDType::Q5K);
        assert_eq!(plan("Q4_K_M", "output.weight"), GgmlDType::Q6K);
        assert_eq!(plan("IQ1_M", "blk.0.attn_q.weight"), GgmlDType::IQ1M);
    }

    #[test]
    fn more_bits_layers_match_llama_cpp_for_18_layers() {
        let picked: Vec<usize> = (0..18).filter(|&i| use_more_bits(i, 18)).collect();
        assert_eq!(picked, vec![0, 1, 4, 7, 10, 13, 15, 16, 17]);
    }

    #[test]
    fn norms_and_vectors_are_never_quantized() {
        assert!(!allows_quantization("blk.0.attn_norm.weight", 1));
        assert!(!allows_quantization("blk.0.attn_q_norm.weight", 2));
        assert!(!allows_quantization(
            "model.layers.0.input_layernorm.weight",
            2
        ));
        assert!(allows_quantization("blk.0.ffn_down.weight", 2));
        assert!(!allows_quantization("blk.0.ffn_down.bias", 2));
    }
}
