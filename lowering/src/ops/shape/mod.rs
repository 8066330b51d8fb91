//! Data movement: reshapes, transposes, concatenation, slicing, gathering, tiling, padding.

use crate::ops::OpDef;

pub mod concat;
pub mod gather;
pub mod pad;
pub mod reshape;
pub mod slice;
pub mod split;
pub mod tile;
pub mod transpose;

pub const OPS: &[OpDef] = &[
    reshape::RESHAPE,
    reshape::FLATTEN,
    reshape::SQUEEZE,
    reshape::UNSQUEEZE,
    reshape::IDENTITY,
    reshape::DROPOUT,
    transpose::TRANSPOSE,
    concat::CONCAT,
    split::SPLIT,
    slice::SLICE,
    gather::GATHER,
    gather::GATHER_ELEMENTS,
    tile::TILE,
    tile::EXPAND,
    pad::PAD,
];
