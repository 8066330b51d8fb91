//! Protobuf wire-format editing of an ONNX model: fields are kept as their bytes, so that what
//! `frontend::onnx` does not declare (functions, training info, metadata, quantization
//! annotations) survives a rewrite unchanged. Only the fields named here are rebuilt.

use prost::Message;

/// One field of a message: its number, wire type and the bytes of its value (for
/// length-delimited fields, without the length).
#[derive(Clone, Debug)]
pub struct Field<'a> {
    pub number: u32,
    pub wire_type: u8,
    /// The whole field as written (key, length and value): copied as is when kept.
    pub raw: &'a [u8],
    /// The value: the payload of a length-delimited field, else the varint/fixed bytes.
    pub value: &'a [u8],
}

fn varint(b: &[u8], at: &mut usize) -> Result<u64, String> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*at).ok_or("truncated varint")?;
        *at += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("varint longer than 10 bytes".into())
}

/// The fields of a message, in order.
pub fn fields(msg: &[u8]) -> Result<Vec<Field<'_>>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < msg.len() {
        let start = at;
        let key = varint(msg, &mut at)?;
        let number = u32::try_from(key >> 3).map_err(|_| "field number too large")?;
        let wire_type = (key & 7) as u8;
        let (vs, ve) = match wire_type {
            0 => {
                let s = at;
                varint(msg, &mut at)?;
                (s, at)
            }
            1 => (at, at + 8),
            2 => {
                let n = usize::try_from(varint(msg, &mut at)?).map_err(|_| "length too large")?;
                (at, at.checked_add(n).ok_or("length overflows")?)
            }
            5 => (at, at + 4),
            t => return Err(format!("unsupported wire type {t}")),
        };
        if ve > msg.len() {
            return Err("field runs past the end of its message".into());
        }
        at = ve;
        out.push(Field {
            number,
            wire_type,
            raw: &msg[start..ve],
            value: &msg[vs..ve],
        });
    }
    Ok(out)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a length-delimited field.
pub fn put_bytes(out: &mut Vec<u8>, number: u32, value: &[u8]) {
    put_varint(out, (u64::from(number) << 3) | 2);
    put_varint(out, value.len() as u64);
    out.extend_from_slice(value);
}

/// Appends a message as a length-delimited field.
pub fn put_message(out: &mut Vec<u8>, number: u32, m: &impl Message) {
    put_bytes(out, number, &m.encode_to_vec());
}

/// A NodeProto with the strings of its `input` (field 1) and `output` (field 2) lists mapped by
/// `rename`; every other field is kept as written.
pub fn rename_node_io(
    node: &[u8],
    rename: &dyn Fn(bool, &str) -> Option<String>,
) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(node.len() + 16);
    for f in fields(node)? {
        let is_io = (f.number == 1 || f.number == 2) && f.wire_type == 2;
        let name = is_io.then(|| String::from_utf8_lossy(f.value).into_owned());
        match name.and_then(|n| rename(f.number == 2, &n)) {
            Some(new) => put_bytes(&mut out, f.number, new.as_bytes()),
            None => out.extend_from_slice(f.raw),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::NodeProto;

    #[test]
    fn renaming_keeps_unknown_fields_and_order() {
        let n = NodeProto {
            input: vec!["a".into(), "b".into()],
            output: vec!["y".into()],
            op_type: Some("Add".into()),
            ..Default::default()
        };
        let mut bytes = n.encode_to_vec();
        // A field frontend::onnx does not declare (number 99, a string).
        put_bytes(&mut bytes, 99, b"kept");
        let r = rename_node_io(&bytes, &|is_out, s| {
            (s == "b" && !is_out || s == "y" && is_out).then(|| format!("{s}2"))
        })
        .unwrap();
        let back = NodeProto::decode(&r[..]).unwrap();
        assert_eq!(back.input, vec!["a", "b2"]);
        assert_eq!(back.output, vec!["y2"]);
        assert!(fields(&r)
            .unwrap()
            .iter()
            .any(|f| f.number == 99 && f.value == b"kept"));
    }

    #[test]
    fn malformed_bytes_are_errors() {
        assert!(fields(&[0x0a, 0x05, 1]).is_err(), "length past the end");
        assert!(fields(&[0x0b]).is_err(), "wire type 3");
        assert!(fields(&[0x80; 11]).is_err());
    }
}
