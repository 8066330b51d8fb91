//! Repeats a constant operand that an Add, Sub, Mul or Div broadcasts over leading dims
//! (`x [B, S, D] + pos [1, S, D]`, GPT-2's position embeddings) to the full shape.
//!
//! Why: the HTP applies batch 0's slice of such an operand to every batch once a LayerNorm
//! follows, directly or through further Adds it reassociates (measured on libQnnHtp 2.51, SoC 60:
//! tiny GPT-2 with batch 2 had logits off by 0.65 for outputs up to 1.0 in the second batch;
//! with the operand repeated, 2e-3 like batch 1). The HTP handles per-channel vectors `[D]` and
//! scalars correctly, and those are left alone, as are operands that would exceed
//! `MAX_ELEMENTS` once repeated (the LayerNorm expansion in ops/norm/layer_norm.rs still covers
//! the direct case).

use crate::ir::tensor::numel;
use crate::ir::Graph;

/// Largest repeated constant, in elements (16 MiB of f32).
const MAX_ELEMENTS: usize = 1 << 22;

/// The full shape, when `s` is `out` with some leading dims of size 1 (or missing) and at
/// least two trailing dims carrying data.
fn leading_broadcast(s: &[usize], out: &[usize]) -> bool {
    if s.len() > out.len() || numel(s) <= 1 || s == out {
        return false;
    }
    let pad = out.len() - s.len();
    let mut full = vec![1; pad];
    full.extend_from_slice(s);
    // Leading run of broadcast dims, then equal dims to the end.
    let k = full.iter().zip(out).take_while(|(a, b)| a != b).count();
    k > 0
        && full[..k].iter().all(|&d| d == 1)
        && full[k..] == out[k..]
        && out[k..].iter().filter(|&&d| d > 1).count() >= 2
}

pub fn run(g: &mut Graph) -> usize {
    let mut changed = 0;
    for i in 0..g.nodes.len() {
        if !matches!(g.nodes[i].op_type.as_str(), "Add" | "Sub" | "Mul" | "Div") {
            continue;
        }
        let Some(y) = g.nodes[i].outputs.first().copied().flatten() else {
            continue;
        };
        let out = g.shape(y).to_vec();
        if numel(&out) > MAX_ELEMENTS {
            continue;
        }
        for slot in 0..g.nodes[i].inputs.len() {
            let Some(v) = g.nodes[i].inputs[slot] else {
                continue;
            };
            let Some(t) = g.konst(v) else {
                continue;
            };
            if !leading_broadcast(&t.shape, &out) {
                continue;
            }
            let full = t.broadcast_to(&out);
            let name = format!("{}_repeated", g.nodes[i].name);
            let nv = g.add_const(&name, full);
            g.nodes[i].inputs[slot] = Some(nv);
            changed += 1;
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::leading_broadcast;

    #[test]
    fn which_operands_are_repeated() {
        assert!(leading_broadcast(&[1, 32, 64], &[2, 32, 64]));
        assert!(leading_broadcast(&[32, 64], &[2, 32, 64]));
        assert!(leading_broadcast(&[1, 1, 32, 64], &[2, 4, 32, 64]));
        // Per-channel vectors, scalars, equal shapes and batch 1 stay as they are.
        assert!(!leading_broadcast(&[64], &[2, 32, 64]));
        assert!(!leading_broadcast(&[1], &[2, 32, 64]));
        assert!(!leading_broadcast(&[2, 32, 64], &[2, 32, 64]));
        assert!(!leading_broadcast(&[1, 32, 64], &[1, 32, 64]));
        // Broadcasts inside (conv bias [C, 1, 1]) are not leading.
        assert!(!leading_broadcast(&[8, 1, 1], &[2, 8, 4, 4]));
        assert!(!leading_broadcast(&[1, 32, 1], &[2, 32, 64]));
    }
}
