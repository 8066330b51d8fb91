//! Data movement: reshapes, transposes, concatenation, slicing, gathering, tiling, padding.

use crate::ops::Rule;

pub mod concat;
pub mod gather;
pub mod pad;
pub mod reshape;
pub mod slice;
pub mod split;
pub mod tile;
pub mod transpose;

pub const RULES: &[(&str, Rule)] = &[
    ("Reshape", reshape::reshape),
    ("Flatten", reshape::reshape),
    ("Squeeze", reshape::reshape),
    ("Unsqueeze", reshape::reshape),
    ("Identity", reshape::reshape),
    ("Dropout", reshape::reshape),
    ("Transpose", transpose::transpose),
    ("Concat", concat::concat),
    ("Split", split::split),
    ("Slice", slice::slice),
    ("Gather", gather::gather),
    ("GatherElements", gather::gather_elements),
    ("Tile", tile::tile),
    ("Expand", tile::expand),
    ("Pad", pad::pad),
];
