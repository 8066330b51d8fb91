//! Shape arithmetic shared by shape inference, constant folding and the rules.

use crate::error::Result;
use crate::ir::Node;

/// The numpy broadcast of `shapes`; an error on `n` when they do not broadcast.
pub fn broadcast(n: &Node, shapes: &[&[usize]]) -> Result<Vec<usize>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1usize; rank];
    for s in shapes {
        let off = rank - s.len();
        for (i, &d) in s.iter().enumerate() {
            let o = &mut out[off + i];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return Err(n.err_invalid(format!("shapes {shapes:?} do not broadcast")));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_rejects_mismatch() {
        let n = Node::new("a", "Add");
        assert_eq!(
            broadcast(&n, &[&[2, 1, 4], &[3, 1]]).unwrap(),
            vec![2, 3, 4]
        );
        assert!(broadcast(&n, &[&[2, 3], &[4]]).is_err());
    }
}
