//! Data movement: reshapes, transposes, concatenation, slicing, gathering and scattering,
//! tiling, padding.

use crate::ops::OpDef;

pub mod concat;
pub mod dropout;
pub mod gather;
pub mod gather_nd;
pub mod pad;
pub mod reshape;
pub mod scatter;
pub mod slice;
pub mod split;
pub mod squeeze;
pub mod tile;
pub mod transpose;
pub mod trilu;

pub const OPS: &[OpDef] = &[
    reshape::RESHAPE,
    reshape::FLATTEN,
    squeeze::SQUEEZE,
    squeeze::UNSQUEEZE,
    reshape::IDENTITY,
    dropout::DROPOUT,
    transpose::TRANSPOSE,
    concat::CONCAT,
    split::SPLIT,
    slice::SLICE,
    gather::GATHER,
    gather::GATHER_ELEMENTS,
    gather_nd::GATHER_ND,
    tile::TILE,
    tile::EXPAND,
    pad::PAD,
    scatter::SCATTER_ELEMENTS,
    scatter::SCATTER,
    scatter::SCATTER_ND,
    trilu::TRILU,
];
